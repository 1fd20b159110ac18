package skiplock

// ClaimSQLForTest exposes the claim statement so a test can EXPLAIN it.
func (c *Client) ClaimSQLForTest() string { return c.store.SQL("claim") }
