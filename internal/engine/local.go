package engine

import "sync"

// localQueue holds a producer's claimed jobs until an executor takes them. Jobs of a
// plain queue, and those of a fair queue that go to executors idle at the claim or
// bypass the rotation, wait in one first-in-first-out line (front). The other jobs
// of a fair queue (docs/fairness.md) wait by concurrency key and are taken key by
// key, in turns, a key of weight w taking w jobs per turn — across claims: a key's
// job claimed after another key's backlog filled the prefetch waits for one turn of
// each key waiting here, not for the backlog. So a fair queue prefetches as much as
// a plain one (and claims as large batches) without a burst of one key delaying the
// others in the process.
type localQueue struct {
	mu       sync.Mutex
	nonEmpty *sync.Cond
	limit    int // the most jobs it holds: the producer's whole capacity
	n        int
	closed   bool
	front    []*flight
	keys     map[string]*localKey
	ring     []*localKey // the keys with waiting jobs in turn order; ring[0] has the turn
}

// localKey is one concurrency key's waiting jobs, in the order claimed.
type localKey struct {
	key    string
	jobs   []*flight
	weight int
	left   int // jobs ring[0] may still take in its current turn
}

func newLocalQueue(limit int) *localQueue {
	q := &localQueue{limit: limit, keys: map[string]*localKey{}}
	q.nonEmpty = sync.NewCond(&q.mu)
	return q
}

// push queues f: in the front line when weight is 0, else in its key's line, the key
// weighing weight (the latest claim's weight for the key wins). It never blocks; it
// reports false, queueing nothing, when the queue holds limit jobs or is closed.
func (q *localQueue) push(f *flight, weight int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.n >= q.limit {
		return false
	}
	q.n++
	if weight <= 0 {
		q.front = append(q.front, f)
	} else {
		key := f.row.ConcurrencyKey
		k := q.keys[key]
		if k == nil {
			k = &localKey{key: key, left: weight}
			q.keys[key] = k
			q.ring = append(q.ring, k)
		}
		k.weight = weight
		k.jobs = append(k.jobs, f)
	}
	q.nonEmpty.Signal()
	return true
}

// pop takes the next job, waiting for one; false once the queue is closed and empty.
func (q *localQueue) pop() (*flight, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.n == 0 && !q.closed {
		q.nonEmpty.Wait()
	}
	if q.n == 0 {
		return nil, false
	}
	q.n--
	if len(q.front) > 0 {
		f := q.front[0]
		q.front[0] = nil
		q.front = q.front[1:]
		return f, true
	}
	k := q.ring[0]
	f := k.jobs[0]
	k.jobs[0] = nil
	k.jobs = k.jobs[1:]
	k.left--
	switch {
	case len(k.jobs) == 0:
		delete(q.keys, k.key)
		q.ring[0] = nil
		q.ring = q.ring[1:]
	case k.left <= 0:
		k.left = k.weight
		q.ring[0] = nil
		q.ring = append(q.ring[1:], k)
	}
	return f, true
}

// len is how many jobs wait.
func (q *localQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// close wakes the executors; they take what is left (and hand it back), then stop.
func (q *localQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.nonEmpty.Broadcast()
}
