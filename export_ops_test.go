package skiplock

// StoreSQLForTest exposes a named store statement so tests can EXPLAIN it.
func (c *Client) StoreSQLForTest(name string) string { return c.store.SQL(name) }
