// Command orders is the example plugin behind the orders.* handlers of
// examples/flows: it validates orders (fulfilment pipeline, order-approval
// itinerary) and approves large ones against a credit limit.
package main

import (
	"context"
	"fmt"
	"math"
	"net/mail"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/plugins/sdk"
)

func main() {
	sdk.Serve(map[string]sdk.Handler{
		"validate": sdk.Typed(validate),
		"approve":  sdk.Typed(approve),
	})
}

// Order is examples/flows/schemas/order.json. Every field of the schema is
// here, so that an order passed through keeps all of it.
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

var log = sdk.Logger(sdk.LevelFromEnv("LOG_LEVEL"))

// validate checks what the schema cannot: that the lines add up, that the
// order is not from the future, that it can be shipped. It returns the order
// normalised. An invalid order is fatal: retrying will not make it valid.
func validate(ctx context.Context, env sdk.Envelope, o Order) (Order, error) {
	o.Email = strings.ToLower(strings.TrimSpace(o.Email))
	o.Currency = strings.ToUpper(o.Currency)
	o.ShipTo.Country = strings.ToUpper(o.ShipTo.Country)
	if o.Items == nil {
		o.Items = []Item{}
	}

	var problems []string
	if _, err := mail.ParseAddress(o.Email); err != nil {
		problems = append(problems, fmt.Sprintf("email %q is not an address", o.Email))
	}
	if o.PlacedAt.After(time.Now().Add(5 * time.Minute)) {
		problems = append(problems, fmt.Sprintf("placed_at %s is in the future", o.PlacedAt.Format(time.RFC3339)))
	}
	lines := 0.0
	for i, it := range o.Items {
		if it.Quantity < 1 {
			problems = append(problems, fmt.Sprintf("item %d (%s) has quantity %d", i, it.SKU, it.Quantity))
		}
		lines += float64(it.Quantity) * it.UnitPrice
	}
	// The total includes shipping, so it may exceed the lines, never fall short.
	if cents(o.Total) < cents(lines) {
		problems = append(problems, fmt.Sprintf("total %.2f is less than the lines' %.2f", o.Total, lines))
	}
	if len(o.Items) > 0 && (o.ShipTo.Line1 == "" || o.ShipTo.Postcode == "") {
		problems = append(problems, "an order with items needs a full ship_to address")
	}
	if len(problems) > 0 {
		return Order{}, sdk.Fatal(fmt.Errorf("order %s is invalid: %s", o.OrderID, strings.Join(problems, "; ")))
	}
	log.DebugContext(ctx, "order valid", "order_id", o.OrderID, "message_id", env.MessageID, "total", o.Total)
	return o, nil
}

// approve runs for orders over the approval threshold (the itinerary's
// `when`). Up to the credit limit it approves; above it the order is held
// for a person, which stops the route: a decision, not a failure.
func approve(ctx context.Context, env sdk.Envelope, o Order) (Order, error) {
	limit := creditLimit()
	if o.Total > limit {
		log.InfoContext(ctx, "order held for manual approval", "order_id", o.OrderID,
			"total", o.Total, "limit", limit, "correlation_id", env.CorrelationID)
		return Order{}, sdk.ErrStop
	}
	now := time.Now().UTC()
	o.ApprovedBy = "credit-limit"
	o.ApprovedAt = &now
	log.InfoContext(ctx, "order approved", "order_id", o.OrderID, "total", o.Total, "limit", limit)
	return o, nil
}

// creditLimit is APPROVAL_LIMIT from the plugin's environment, 5000 when
// unset.
func creditLimit() float64 {
	if v, err := strconv.ParseFloat(os.Getenv("APPROVAL_LIMIT"), 64); err == nil && v > 0 {
		return v
	}
	return 5000
}

func cents(v float64) int64 { return int64(math.Round(v * 100)) }
