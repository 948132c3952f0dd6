// Command payments is the example plugin behind the payments.* handlers of
// examples/flows: it charges orders (the charge stop of order-approval, the
// first step of the place-order saga), refunds them when the saga is undone,
// and runs the nightly invoices.
//
// The payment provider is simulated; a real plugin calls it here with the
// order id as idempotency key, so that a redelivered charge is not charged
// twice even without `idempotent: true` in the flow.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/plugins/sdk"
)

func main() {
	sdk.Serve(map[string]sdk.Handler{
		"charge":  sdk.Typed(charge),
		"refund":  sdk.TypedCompensation(refund),
		"invoice": sdk.Typed(invoice),
	})
}

// Order is examples/flows/schemas/order.json. Every field of the schema is
// here, so that the order charge returns keeps all of it.
type Order struct {
	OrderID    string     `json:"order_id"`
	CustomerID string     `json:"customer_id"`
	Email      string     `json:"email"`
	PlacedAt   time.Time  `json:"placed_at"`
	Currency   string     `json:"currency"`
	Total      float64    `json:"total"`
	Items      []Item     `json:"items"`
	ShipTo     Address    `json:"ship_to"`
	ApprovedBy string     `json:"approved_by,omitempty"`
	ApprovedAt *time.Time `json:"approved_at,omitempty"`
	PaymentID  string     `json:"payment_id,omitempty"`
}

type Item struct {
	SKU       string  `json:"sku"`
	Quantity  int     `json:"quantity"`
	UnitPrice float64 `json:"unit_price"`
}

type Address struct {
	Name     string `json:"name"`
	Line1    string `json:"line1"`
	Line2    string `json:"line2,omitempty"`
	City     string `json:"city"`
	Postcode string `json:"postcode"`
	Country  string `json:"country"`
}

// InvoiceRun is the InvoiceRun type of examples/flows/place-order.yaml.
type InvoiceRun struct {
	Kind  string     `json:"kind"`
	Since *time.Time `json:"since,omitempty"`
}

// maxCharge is the most the simulated provider accepts in one charge.
const maxCharge = 10000

var (
	log        = sdk.Logger(sdk.LevelFromEnv("LOG_LEVEL"))
	currencies = map[string]bool{"EUR": true, "GBP": true, "USD": true}
)

// charge takes the payment for an order and returns the order with its
// payment id. A declined payment is fatal: retrying the same card for the
// same amount is declined again.
func charge(ctx context.Context, env sdk.Envelope, o Order) (Order, error) {
	switch {
	case !currencies[o.Currency]:
		return Order{}, sdk.Fatal(fmt.Errorf("order %s: currency %s is not accepted", o.OrderID, o.Currency))
	case o.Total > maxCharge:
		return Order{}, sdk.Fatal(fmt.Errorf("order %s: payment of %.2f %s declined (over %d)", o.OrderID, o.Total, o.Currency, maxCharge))
	}
	if o.PaymentID == "" {
		o.PaymentID = paymentID(o.OrderID)
	}
	log.InfoContext(ctx, "payment taken", "order_id", o.OrderID, "payment_id", o.PaymentID,
		"amount", o.Total, "currency", o.Currency, "message_id", env.MessageID, "attempt", env.Attempt)
	return o, nil
}

// refund undoes charge when the place-order saga is compensated: it gets
// the saga's input and what charge returned (the order with its payment
// id). The refund is a new fact, not an erasure: the customer sees a charge
// and a refund.
func refund(ctx context.Context, env sdk.Envelope, o Order, charged Order) error {
	id := charged.PaymentID
	if id == "" {
		id = paymentID(o.OrderID)
	}
	log.InfoContext(ctx, "payment refunded", "order_id", o.OrderID, "payment_id", id,
		"amount", o.Total, "currency", o.Currency, "correlation_id", env.CorrelationID, "queue", env.Queue)
	return nil
}

// invoice runs the invoices for orders paid since the given time: for the
// nightly run, since midnight UTC the day before.
func invoice(ctx context.Context, env sdk.Envelope, run InvoiceRun) (sdk.None, error) {
	since := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -1)
	if run.Since != nil {
		since = run.Since.UTC()
	}
	if since.After(time.Now()) {
		return sdk.None{}, sdk.Fatal(fmt.Errorf("invoice run since %s is in the future", since.Format(time.RFC3339)))
	}
	log.InfoContext(ctx, "invoice run", "kind", run.Kind, "since", since.Format(time.RFC3339),
		"message_id", env.MessageID, "attempt", env.Attempt)
	return sdk.None{}, nil
}

// paymentID is the provider's id for an order's payment, derived from the
// order id as the provider's idempotency key makes it.
func paymentID(orderID string) string {
	sum := sha256.Sum256([]byte("payment:" + orderID))
	return "pay-" + hex.EncodeToString(sum[:8])
}
