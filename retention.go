package skiplock

// retentionServices returns the maintenance services that delete finished jobs and
// manage partitions. (Filled in by the operations work: retention, partitions.)
func (c *Client) retentionServices() []maintenanceService { return nil }
