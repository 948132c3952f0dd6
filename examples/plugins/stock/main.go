// Command stock is the example plugin behind the stock.* handlers of
// examples/flows: it holds stock for an order (fulfilment pipeline,
// place-order saga) and releases the hold when the saga is undone.
//
// Stock levels and holds are kept in memory here; a real plugin keeps them
// in the warehouse system. The handlers are idempotent by order id, because
// a message can be delivered more than once.
package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/acemq/acemq-flow/plugins/sdk"
)

func main() {
	sdk.Serve(map[string]sdk.Handler{
		"reserve": sdk.Typed(reserve),
		"release": sdk.Typed(release),
	})
}

// Order is the part of examples/flows/schemas/order.json that stock needs.
type Order struct {
	OrderID string  `json:"order_id"`
	Items   []Item  `json:"items"`
	ShipTo  Address `json:"ship_to"`
}

type Item struct {
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

// holdFor is how long stock is held: long enough for payment, short enough
// that an abandoned order does not keep stock from other customers.
const holdFor = 15 * time.Minute

var (
	log = sdk.Logger(sdk.LevelFromEnv("LOG_LEVEL"))

	mu    sync.Mutex
	holds = map[string]Reservation{} // by order id
	// onHand is the stock per SKU; a SKU not listed has defaultOnHand.
	onHand        = map[string]int{"CHAIR-ERGO-BLK": 40, "DESK-LAMP-LED": 120}
	defaultOnHand = 1000
)

// reserve holds the order's items in the warehouse nearest its address and
// returns the reservation. A second delivery for the same order returns the
// hold already made. Too little stock is a retryable failure: stock arrives,
// and the retry ladder tries again later.
func reserve(ctx context.Context, env sdk.Envelope, o Order) (Reservation, error) {
	if len(o.Items) == 0 {
		// Nothing physical to hold or ship (a gift-card order): the
		// pipeline stops here, which is a decision, not a failure.
		log.InfoContext(ctx, "order has no items to reserve", "order_id", o.OrderID)
		return Reservation{}, sdk.ErrStop
	}
	mu.Lock()
	defer mu.Unlock()
	if r, ok := holds[o.OrderID]; ok {
		log.DebugContext(ctx, "stock already held", "order_id", o.OrderID, "attempt", env.Attempt)
		return r, nil
	}
	for _, it := range o.Items {
		if have := available(it.SKU); have < it.Quantity {
			return Reservation{}, fmt.Errorf("order %s: %d of %s wanted, %d on hand", o.OrderID, it.Quantity, it.SKU, have)
		}
	}
	r := Reservation{
		ReservationID: "rsv-" + o.OrderID,
		OrderID:       o.OrderID,
		Warehouse:     warehouseFor(o.ShipTo.Country),
		Until:         time.Now().UTC().Add(holdFor).Truncate(time.Second),
		ShipTo:        o.ShipTo,
	}
	for _, it := range o.Items {
		onHand[it.SKU] = available(it.SKU) - it.Quantity
		r.Lines = append(r.Lines, Line{SKU: it.SKU, Quantity: it.Quantity})
	}
	holds[o.OrderID] = r
	log.InfoContext(ctx, "stock held", "order_id", o.OrderID, "warehouse", r.Warehouse, "until", r.Until)
	return r, nil
}

// release undoes reserve when the place-order saga is compensated. Releasing
// an order that holds nothing is fine: the compensation may run twice.
func release(ctx context.Context, env sdk.Envelope, o Order) (sdk.None, error) {
	mu.Lock()
	defer mu.Unlock()
	r, ok := holds[o.OrderID]
	if !ok {
		log.DebugContext(ctx, "no stock held", "order_id", o.OrderID)
		return sdk.None{}, nil
	}
	for _, l := range r.Lines {
		onHand[l.SKU] = available(l.SKU) + l.Quantity
	}
	delete(holds, o.OrderID)
	log.InfoContext(ctx, "stock released", "order_id", o.OrderID, "correlation_id", env.CorrelationID)
	return sdk.None{}, nil
}

// available is the stock on hand for sku; mu must be held.
func available(sku string) int {
	if n, ok := onHand[sku]; ok {
		return n
	}
	return defaultOnHand
}

func warehouseFor(country string) string {
	switch country {
	case "DE", "AT", "CH", "PL", "CZ":
		return "DUS-1"
	case "GB", "IE":
		return "MAN-1"
	}
	return "AMS-1"
}
