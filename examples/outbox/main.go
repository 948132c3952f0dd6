// Command outbox is the write side of the transactional outbox, as a service
// would do it: each order is saved with the message that announces it in one
// transaction, so one commit decides both. `acemq-flow relay` then publishes
// the committed messages; a rolled-back order is never announced, and a
// committed one always is. With --remind-in, the same transaction also
// schedules a payment reminder for later: an outbox record with a
// DeliverAt, which the relay puts into the delay ladder and a runtime
// delivers when due.
//
//	acemq-flow migrate --store sqlite:shop.db
//	ACEMQ_STORE_URL=sqlite:shop.db go run ./examples/outbox --count 10 --rollback-every 3 --remind-in 1m
//	acemq-flow relay --store sqlite:shop.db
//
// It works on the store ACEMQ_STORE_URL names: sqlite:PATH (the default,
// sqlite:acemq.db) or postgres://…. Copy placeOrder: it is the whole pattern.
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/postgres"
	"github.com/acemq/acemq-flow/stores/sqlite"
	"github.com/acemq/acemq-flow/stores/storeurl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv("ACEMQ_STORE_URL"), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Order is the business row, and the message body that announces it.
type Order struct {
	ID         string `json:"id"`
	Customer   string `json:"customer"`
	TotalCents int64  `json:"total_cents"`
}

// options are the command line.
type options struct {
	count, rollbackEvery int
	exchange, routingKey string
	customer             string
	remindIn             time.Duration // 0: no reminders
	remindKey            string
}

func run(ctx context.Context, args []string, storeURL string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outbox", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.IntVar(&o.count, "count", 5, "how many orders to place")
	fs.IntVar(&o.rollbackEvery, "rollback-every", 0, "roll back every K-th order on purpose (0: never)")
	fs.StringVar(&o.exchange, "exchange", "", "exchange the announcements go to ('' is the default exchange)")
	fs.StringVar(&o.routingKey, "routing-key", "orders.placed", "routing key of the announcements (the queue name for the default exchange)")
	fs.StringVar(&o.customer, "customer", "c-1", "customer placing the orders")
	fs.DurationVar(&o.remindIn, "remind-in", 0, "also schedule a payment reminder this long after each order, in the same transaction (0: none)")
	fs.StringVar(&o.remindKey, "remind-key", "orders.remind", "routing key of the reminders, on --exchange")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.remindIn < 0 {
		fmt.Fprintf(stderr, "outbox: --remind-in must be 0 (no reminders) or positive, not %s\n", o.remindIn)
		return 2
	}
	if storeURL == "" {
		storeURL = "sqlite:acemq.db"
	}
	committed, rolledBack, err := placeOrders(ctx, storeURL, o, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "outbox: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "placed %d orders: %d committed and announced through the outbox, %d rolled back and never announced\n",
		committed+rolledBack, committed, rolledBack)
	if o.remindIn > 0 {
		fmt.Fprintf(stderr, "each committed order has a payment reminder due %s after it (routing key %q), delivered by a runtime through the delay ladder\n", o.remindIn, o.remindKey)
	}
	return 0
}

// placeOrders places o.count orders on the store storeURL names, printing
// the id of each committed one.
func placeOrders(ctx context.Context, storeURL string, o options, out io.Writer) (committed, rolledBack int, err error) {
	backend, err := storeurl.Backend(storeURL)
	if err != nil {
		return 0, 0, err
	}
	// The outbox table is created by `acemq-flow migrate`, never here.
	set, err := storeurl.Open(ctx, storeURL, stores.Options{})
	if err != nil {
		return 0, 0, err
	}
	err = set.CheckSchema(ctx)
	set.Close()
	if err != nil {
		return 0, 0, err
	}

	var place func(ctx context.Context, ord Order, rollback bool) error
	switch backend {
	case "sqlite":
		// A handle of our own, opened the way the store opens its file, so
		// that our transactions wait for the write lock as the relay's do.
		db, err := sql.Open("sqlite", sqlite.DSN(storeurl.SQLitePath(storeURL), 5000))
		if err != nil {
			return 0, 0, err
		}
		defer db.Close()
		if _, err := db.ExecContext(ctx, sqliteOrders); err != nil {
			return 0, 0, fmt.Errorf("create the orders table: %w", err)
		}
		place = func(ctx context.Context, ord Order, rollback bool) error {
			return placeOrderSQLite(ctx, db, ord, o, rollback)
		}
	case "postgres":
		pool, err := pgxpool.New(ctx, storeURL)
		if err != nil {
			return 0, 0, fmt.Errorf("connect to %s: %w", postgres.Redact(storeURL), err)
		}
		defer pool.Close()
		if _, err := pool.Exec(ctx, postgresOrders); err != nil {
			return 0, 0, fmt.Errorf("create the orders table: %w", err)
		}
		place = func(ctx context.Context, ord Order, rollback bool) error {
			return placeOrderPostgres(ctx, pool, ord, o, rollback)
		}
	default:
		return 0, 0, fmt.Errorf("the %s store forgets everything on exit; use sqlite:PATH or postgres://…", backend)
	}

	runID := newRunID()
	for i := 1; i <= o.count; i++ {
		ord := Order{ID: fmt.Sprintf("o-%s-%d", runID, i), Customer: o.customer, TotalCents: int64(1000 + i)}
		rollback := o.rollbackEvery > 0 && i%o.rollbackEvery == 0
		switch err := place(ctx, ord, rollback); {
		case errors.Is(err, errRolledBack):
			rolledBack++
		case err != nil:
			return committed, rolledBack, fmt.Errorf("order %s: %w", ord.ID, err)
		default:
			committed++
			fmt.Fprintln(out, ord.ID)
		}
	}
	return committed, rolledBack, nil
}

// errRolledBack reports an order rolled back on purpose.
var errRolledBack = errors.New("rolled back on purpose")

const sqliteOrders = `CREATE TABLE IF NOT EXISTS shop_orders (
    id TEXT PRIMARY KEY, customer TEXT NOT NULL, total_cents INTEGER NOT NULL)`

const postgresOrders = `CREATE TABLE IF NOT EXISTS shop_orders (
    id text PRIMARY KEY, customer text NOT NULL, total_cents bigint NOT NULL)`

// announcement is the outbox record that tells the world about ord: the
// order as JSON, encoded once, here. The relay publishes these bytes as
// they are.
func announcement(ord Order, o options) (stores.OutboxRecord, error) {
	body, err := json.Marshal(ord)
	if err != nil {
		return stores.OutboxRecord{}, err
	}
	return stores.OutboxRecord{
		Exchange:    o.exchange,
		RoutingKey:  o.routingKey,
		Body:        body,
		ContentType: "application/json",
		Properties: stores.Properties{
			MessageID:    ord.ID, // consumers deduplicate on it
			Type:         "order.placed",
			DeliveryMode: 2,
			Headers:      map[string]any{"x-customer": ord.Customer},
		},
	}, nil
}

// reminder is the outbox record that reminds the customer to pay for ord,
// o.remindIn from now: DeliverAt makes the relay publish it into the delay
// ladder, addressed to o.exchange and o.remindKey, and the runtime that
// consumes the ladder delivers it then, never early. Written in the order's
// transaction, it is scheduled if and only if the order is saved.
func reminder(ord Order, o options, now time.Time) (stores.OutboxRecord, error) {
	body, err := json.Marshal(ord)
	if err != nil {
		return stores.OutboxRecord{}, err
	}
	return stores.OutboxRecord{
		Exchange:    o.exchange,
		RoutingKey:  o.remindKey,
		Body:        body,
		ContentType: "application/json",
		DeliverAt:   now.Add(o.remindIn),
		Properties: stores.Properties{
			MessageID:    ord.ID + "-remind",
			Type:         "order.remind",
			DeliveryMode: 2,
			Headers:      map[string]any{"x-customer": ord.Customer},
		},
	}, nil
}

// records are the outbox records of ord: its announcement and, with
// --remind-in, its reminder.
func records(ord Order, o options) ([]stores.OutboxRecord, error) {
	rec, err := announcement(ord, o)
	if err != nil || o.remindIn == 0 {
		return []stores.OutboxRecord{rec}, err
	}
	later, err := reminder(ord, o, time.Now())
	return []stores.OutboxRecord{rec, later}, err
}

// placeOrderSQLite saves ord and its records in one transaction.
func placeOrderSQLite(ctx context.Context, db *sql.DB, ord Order, o options, rollback bool) error {
	recs, err := records(ord, o)
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // after Commit, a no-op
	if _, err := tx.ExecContext(ctx, `INSERT INTO shop_orders (id, customer, total_cents) VALUES (?, ?, ?)`,
		ord.ID, ord.Customer, ord.TotalCents); err != nil {
		return err
	}
	// The same transaction: the records exist if and only if the order does.
	for _, rec := range recs {
		if _, err := (sqlite.Outbox{}).Add(ctx, tx, rec); err != nil {
			return err
		}
	}
	if rollback {
		return errRolledBack
	}
	return tx.Commit()
}

// placeOrderPostgres is placeOrderSQLite on PostgreSQL.
func placeOrderPostgres(ctx context.Context, pool *pgxpool.Pool, ord Order, o options, rollback bool) error {
	recs, err := records(ord, o)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO shop_orders (id, customer, total_cents) VALUES ($1, $2, $3)`,
			ord.ID, ord.Customer, ord.TotalCents); err != nil {
			return err
		}
		for _, rec := range recs {
			if _, err := (postgres.Outbox{}).Add(ctx, tx, rec); err != nil {
				return err
			}
		}
		if rollback {
			return errRolledBack // BeginFunc rolls back
		}
		return nil
	})
}

// newRunID keeps order ids of separate runs apart.
func newRunID() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
