package decide

import "testing"

func TestRouteAndSlipText(t *testing.T) {
	slip := func(s string) Itinerary {
		it, err := ParseItinerary([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return it
	}
	cases := []struct {
		name, got, want string
	}{
		{"a route marks its position", RouteText([]string{"validate", "reserve", "dispatch"}, 1), "validate,[reserve],dispatch"},
		{"a route at its first step", RouteText([]string{"validate", "reserve"}, 0), "[validate],reserve"},
		{"a position outside the route says so", RouteText([]string{"a", "b"}, 4), "a,b (position 4 is outside the route)"},
		{"a slip shows done stops with times and the current one in brackets", Itinerary.Text(slip(formatSlip)), "validate ✓ 14:03:11 → [charge]"},
		{"a finished slip ends", Itinerary.Text(slip(`{"steps":[],"done":[{"routingKey":"k","completedAt":"2026-09-09T01:02:03Z"}]}`)), "k ✓ 01:02:03 → (end)"},
		{"a stop without a name shows its routing key", Itinerary.Text(slip(`{"steps":[{"exchange":"x","routingKey":"order.ship"}],"done":[]}`)), "[order.ship]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("got %q, want %q", tc.got, tc.want)
			}
		})
	}
}
