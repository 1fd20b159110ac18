package gateway

// QueueState reports, for tests, how many claim requests wait on queue, whether its
// dispatcher is idle (waiting for a signal or the poll, no claim in flight) and how
// many claim statements it has run.
func (g *Gateway) QueueState(queue string) (waiters int, idle bool, claims int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.queues[queue]
	if q == nil {
		return 0, false, 0
	}
	return len(q.waiters), q.idle, q.claims
}
