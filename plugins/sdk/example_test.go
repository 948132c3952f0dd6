package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/plugins/sdk"
)

// Order is the flow type "Order": the typed handler below declares it.
type Order struct {
	ID    string  `json:"id"`
	Total float64 `json:"total"`
}

// Reservation is the flow type "Reservation".
type Reservation struct {
	OrderID string    `json:"order_id"`
	Until   time.Time `json:"until"`
}

// A plugin serving stock.reserve and stock.release: main calls Serve and
// nothing else.
func ExampleServe() {
	sdk.Serve(map[string]sdk.Handler{
		"reserve": sdk.Typed(reserve),
		"release": {Func: release},
		"unhold":  sdk.TypedCompensation(unhold),
	})
}

// unhold undoes a reservation as a saga compensation: it gets the saga's
// input and what its own step (reserve) returned. The envelope says which
// queue the message came from and when the runtime received it.
func unhold(ctx context.Context, env sdk.Envelope, in Order, held Reservation) error {
	if held.OrderID == "" {
		return nil // the step returned nothing: nothing to undo
	}
	_ = env.Queue      // "place-order.reserve-stock.compensate"
	_ = env.ReceivedAt // when the runtime received it
	return nil
}

func reserve(ctx context.Context, env sdk.Envelope, in Order) (Reservation, error) {
	switch {
	case in.Total == 0:
		return Reservation{}, sdk.ErrStop // nothing to reserve: the run stops here
	case in.ID == "":
		return Reservation{}, sdk.Fatal(errors.New("order without id")) // dead-lettered at once
	case env.Attempt > 3:
		// Retried messages carry their attempt number.
	}
	return Reservation{OrderID: in.ID, Until: time.Now().Add(15 * time.Minute)}, nil
}

func release(ctx context.Context, req *sdk.Request) (*sdk.Result, error) {
	if !req.Compensate {
		return nil, sdk.Fatal(fmt.Errorf("release is a compensation, called for %s", req.Envelope.MessageID))
	}
	return nil, nil // returns nothing
}
