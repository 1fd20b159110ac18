package skiplock

// runtime holds a started client's goroutines (see runtime_*.go).
type runtime struct{}
