package runtime

import "time"

// SetHoldBeforeRequeue sets how long a message that could go nowhere else
// waits before it goes back to its queue, until the test ends.
func SetHoldBeforeRequeue(t interface{ Cleanup(func()) }, d time.Duration) {
	old := holdBeforeRequeue
	holdBeforeRequeue = d
	t.Cleanup(func() { holdBeforeRequeue = old })
}

// SetExchangeTrust sets how long the runtimes started from now trust that
// an exchange they do not declare exists, until the test ends.
func SetExchangeTrust(t interface{ Cleanup(func()) }, found time.Duration) {
	old := trustExchangeFound
	trustExchangeFound = found
	t.Cleanup(func() { trustExchangeFound = old })
}
