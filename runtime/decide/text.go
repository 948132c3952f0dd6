package decide

import (
	"strconv"
	"strings"
)

// RouteText writes a declared route with the current step in brackets:
// "validate,[reserve],dispatch".
func RouteText(route []string, pos int) string {
	parts := make([]string, len(route))
	for i, s := range route {
		if i == pos {
			s = "[" + s + "]"
		}
		parts[i] = s
	}
	out := strings.Join(parts, ",")
	if pos < 0 || pos >= len(route) {
		out += " (position " + strconv.Itoa(pos) + " is outside the route)"
	}
	return out
}

// Text writes the slip as a readable route: the stops done with
// their times (UTC), then the current stop in brackets, then the rest:
// "validate ✓ 14:03:11 → approve ✓ 14:03:12 → [charge] → ship".
func (it Itinerary) Text() string {
	var parts []string
	for _, s := range it.Done() {
		p := stopName(s) + " ✓"
		if !s.CompletedAt.IsZero() {
			p += " " + s.CompletedAt.UTC().Format("15:04:05")
		}
		parts = append(parts, p)
	}
	for i, s := range it.Steps() {
		if i == 0 {
			parts = append(parts, "["+stopName(s)+"]")
		} else {
			parts = append(parts, stopName(s))
		}
	}
	if len(it.Steps()) == 0 {
		parts = append(parts, "(end)")
	}
	return strings.Join(parts, " → ")
}

func stopName(s Stop) string {
	if s.Name != "" {
		return s.Name
	}
	return s.RoutingKey
}
