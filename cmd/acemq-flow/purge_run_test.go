package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/test/queuetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// lockedBuffer is a bytes.Buffer a command writes to while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRelayAndRunPurgeTheStore: the relay deletes the records it
// published once they are older than --published-retention, and `run`
// purges its store on a schedule: nothing else deletes expired claims or
// published records, which grew for ever before.
func TestRelayAndRunPurgeTheStore(t *testing.T) {
	e := queuetest.New(t)
	store, st := migratedSQLite(t)
	q := e.Queue("out")
	addRecord(t, st, stores.OutboxRecord{RoutingKey: q, Body: []byte(`{}`), Properties: stores.Properties{MessageID: "o-1"}})
	e.Consume(q)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"relay", []string{"relay", "--store", store, "--amqp", e.URL, "--poll", "10ms", "--purge-every", "20ms", "--published-retention", "1ms"},
			`msg="store purged" expired=0 published=1`},
		{"run", []string{"run", "--store", store, "--amqp", e.URL, "--admin", "", "--blobs", "file:" + t.TempDir(), "--relay", "--purge-every", "20ms", "../../examples/flows/fulfilment.yaml"},
			`msg="store purged"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			var out bytes.Buffer
			var errb lockedBuffer
			code := make(chan int, 1)
			go func() { code <- run(ctx, tc.args, strings.NewReader(""), &out, &errb) }()
			testenv.Eventually(t, 30*time.Second, func() error {
				if !strings.Contains(errb.String(), tc.want) {
					return testenv.Errorf("no %q in the log yet:\n%s", tc.want, errb.String())
				}
				return nil
			})
			cancel()
			if c := <-code; c != 0 {
				t.Errorf("%s: exit %d, want 0\nstderr: %s", tc.name, c, errb.String())
			}
		})
	}
}
