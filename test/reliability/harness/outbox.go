package harness

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/postgres"
)

// OutboxWriter is an application that writes each message to the outbox
// of a PostgreSQL store in a transaction of its own, for the store's relay
// to publish: what S10 puts through a database that crashes. Each
// message's outcome goes to Sent as the generator's would: ok once its
// transaction committed, fail while it definitely did not (it is written
// again, as an application retries its transaction), info when the commit
// met the crash and may or may not have happened (written again too: a
// record committed twice is a duplicate publish, which an idempotent
// consumer absorbs).
type OutboxWriter struct {
	Sent    *Sent
	ReplyTo string
	pool    *pgxpool.Pool
	// Retries counts the writes made again after a failure or an unknown
	// commit.
	Retries int
	// LoseCommit, when set, is asked after each commit that succeeded:
	// true has the writer take it for a commit whose answer was lost (an
	// ambiguous commit, S12), record info and write the message again.
	LoseCommit func() bool
	// Lost counts the commits LoseCommit turned ambiguous.
	Lost int
}

// NewOutboxWriter opens a pool on url (the store's URL), closed when the
// test ends.
func NewOutboxWriter(t testing.TB, url string, sent *Sent, replyTo string) *OutboxWriter {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatalf("outbox writer: %v", err)
	}
	t.Cleanup(pool.Close)
	return &OutboxWriter{Sent: sent, ReplyTo: replyTo, pool: pool}
}

// Write writes msgs at rate per second, each until its transaction
// committed or d passed since it was first tried; it returns the first
// message given up.
func (w *OutboxWriter) Write(rate int, d time.Duration, msgs ...Message) error {
	tick := time.NewTicker(time.Second / time.Duration(max(rate, 1)))
	defer tick.Stop()
	for _, m := range msgs {
		<-tick.C
		start := time.Now()
		for {
			err := w.write(m)
			if err == nil {
				break
			}
			if time.Since(start) > d {
				return fmt.Errorf("outbox writer: %s not written within %s: %w", m.ID, d, err)
			}
			w.Retries++
			time.Sleep(100 * time.Millisecond) // an application's pause before it tries its transaction again
		}
	}
	return nil
}

func (w *OutboxWriter) write(m Message) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := time.Now()
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		w.Sent.set(m.ID, Fail, time.Time{})
		return err
	}
	defer tx.Rollback(context.Background())
	ct := m.ContentType
	if ct == "" {
		ct = "application/json"
	}
	headers := map[string]any{}
	for k, v := range m.Headers {
		headers[k] = v
	}
	_, err = postgres.Outbox{}.Add(ctx, tx, stores.OutboxRecord{Exchange: m.Exchange, RoutingKey: m.Key, Body: []byte(m.Body), ContentType: ct,
		Properties: stores.Properties{MessageID: m.ID, ReplyTo: w.ReplyTo, DeliveryMode: 2, Timestamp: now.Unix(), Headers: headers}})
	if err != nil {
		w.Sent.set(m.ID, Fail, time.Time{})
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		// The commit may have reached the server before the connection
		// dropped: unknown, unless the server said no.
		outcome := Info
		if errors.Is(err, pgx.ErrTxCommitRollback) {
			outcome = Fail
		}
		w.Sent.set(m.ID, outcome, time.Time{})
		return err
	}
	if w.LoseCommit != nil && w.LoseCommit() {
		w.Lost++
		w.Sent.set(m.ID, Info, time.Time{})
		return errors.New("the commit's answer was lost (injected)")
	}
	w.Sent.set(m.ID, OK, now)
	return nil
}
