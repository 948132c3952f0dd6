package plan

import (
	"testing"
	"time"
)

func TestWireNamesMatchTheFormat(t *testing.T) {
	cases := []struct {
		name string
		got  string
		want string
	}{
		{"a step queue is pipeline dot step", StepQueue("fulfilment", "reserve"), "fulfilment.reserve"},
		{"a step's registry id is its queue name", StepConsumerID("fulfilment", "reserve"), "fulfilment.reserve"},
		{"a pipeline's exchange is its name", PipelineExchange("fulfilment"), "fulfilment"},
		{"half a second is written in milliseconds", RetryQueue("q", 500*time.Millisecond), "q.retry.500ms"},
		{"two seconds is written in seconds", RetryQueue("q", 2*time.Second), "q.retry.2s"},
		{"ninety seconds is not a whole minute", RetryQueue("q", 90*time.Second), "q.retry.90s"},
		{"sixty seconds is a minute", RetryQueue("q", time.Minute), "q.retry.1m"},
		{"an hour is written in hours", RetryQueue("q", time.Hour), "q.retry.1h"},
		{"a second and a half is written in milliseconds", DelayName(1500 * time.Millisecond), "1500ms"},
		{"the dead-letter queue", DeadLetterQueue("orders.charge"), "orders.charge.dlq"},
		{"the parked queue", ParkedQueue("orders.charge"), "orders.charge.parked"},
		{"a saga step queue", SagaStepQueue("place-order", "take-payment"), "place-order.take-payment"},
		{"a compensation queue", CompensateQueue("place-order", "take-payment"), "place-order.take-payment.compensate"},
		{"the ladder's first level", LadderExchange(0), "acemq.schedule.0"},
		{"the ladder's last level", LadderQueue(LadderLevels - 1), "acemq.schedule.27"},
		{"the ladder's due queue", DueQueue, "acemq.schedule.due"},
		{"a route header", RouteHeader([]string{"validate", "reserve", "dispatch"}), "validate,reserve,dispatch"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("got %q, want %q", tc.got, tc.want)
			}
		})
	}
}
