// Command shipping is the example plugin behind the shipping.* handlers of
// examples/flows: it dispatches reserved stock (the last step of the
// fulfilment pipeline) and books a courier (the last step of the
// place-order saga).
//
// The courier is simulated; a real plugin calls the courier's API here, with
// the call's context, so that the flow's per-call timeout cancels it.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/plugins/sdk"
)

func main() {
	sdk.Serve(map[string]sdk.Handler{
		"dispatch": sdk.Typed(dispatch),
		"book":     sdk.Typed(book),
	})
}

// Reservation is examples/flows/schemas/reservation.json.
type Reservation struct {
	ReservationID string    `json:"reservation_id"`
	OrderID       string    `json:"order_id"`
	Warehouse     string    `json:"warehouse"`
	Until         time.Time `json:"until"`
	Lines         []Line    `json:"lines"`
	ShipTo        Address   `json:"ship_to"`
}

type Line struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

type Address struct {
	Name     string `json:"name"`
	Line1    string `json:"line1"`
	Line2    string `json:"line2,omitempty"`
	City     string `json:"city"`
	Postcode string `json:"postcode"`
	Country  string `json:"country"`
}

// Order is the part of examples/flows/schemas/order.json that shipping needs.
type Order struct {
	OrderID string  `json:"order_id"`
	Items   []Line  `json:"items"`
	ShipTo  Address `json:"ship_to"`
}

var log = sdk.Logger(sdk.LevelFromEnv("LOG_LEVEL"))

// dispatch books the parcel for reserved stock and prints its label. It
// returns nothing: it is the fulfilment pipeline's last step. A reservation
// that ran out before dispatch is fatal: the stock may be gone, and a person
// has to look at the order (it waits in fulfilment.dispatch.dlq).
func dispatch(ctx context.Context, env sdk.Envelope, r Reservation) (sdk.None, error) {
	if time.Now().After(r.Until) {
		return sdk.None{}, sdk.Fatal(fmt.Errorf("reservation %s for order %s expired at %s",
			r.ReservationID, r.OrderID, r.Until.Format(time.RFC3339)))
	}
	parcels := 0
	for _, l := range r.Lines {
		parcels += l.Quantity
	}
	tracking, err := bookCourier(ctx, r.OrderID, r.ShipTo, parcels)
	if err != nil {
		return sdk.None{}, err
	}
	log.InfoContext(ctx, "parcel dispatched", "order_id", r.OrderID, "warehouse", r.Warehouse,
		"tracking", tracking, "attempt", env.Attempt)
	return sdk.None{}, nil
}

// book books the courier for an order in the place-order saga. It cannot be
// undone (the courier is on the way), which is why the saga runs it last.
func book(ctx context.Context, env sdk.Envelope, o Order) (sdk.None, error) {
	if len(o.Items) == 0 {
		log.InfoContext(ctx, "nothing to ship", "order_id", o.OrderID)
		return sdk.None{}, nil
	}
	parcels := 0
	for _, it := range o.Items {
		parcels += it.Quantity
	}
	tracking, err := bookCourier(ctx, o.OrderID, o.ShipTo, parcels)
	if err != nil {
		return sdk.None{}, err
	}
	log.InfoContext(ctx, "courier booked", "order_id", o.OrderID, "tracking", tracking,
		"correlation_id", env.CorrelationID)
	return sdk.None{}, nil
}

// bookCourier stands in for the courier's API. The tracking number is
// derived from the order id, as a courier's idempotency key would make it:
// booking the same order twice gives the same parcel.
func bookCourier(ctx context.Context, orderID string, to Address, parcels int) (string, error) {
	if to.Country == "" || to.Postcode == "" {
		return "", sdk.Fatal(fmt.Errorf("order %s: no country or postcode to ship to", orderID))
	}
	select {
	case <-ctx.Done():
		// Past the flow's timeout: a retryable failure, tried again later.
		return "", fmt.Errorf("order %s: courier did not answer: %w", orderID, ctx.Err())
	case <-time.After(20 * time.Millisecond):
	}
	sum := sha256.Sum256([]byte(orderID))
	return fmt.Sprintf("%s-%s-%d", courierFor(to.Country), strings.ToUpper(hex.EncodeToString(sum[:5])), parcels), nil
}

func courierFor(country string) string {
	switch country {
	case "NL", "BE", "LU":
		return "PNL"
	case "DE", "AT":
		return "DHL"
	}
	return "UPS"
}
