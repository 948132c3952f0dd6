package stores

import (
	"regexp"
	"strings"
)

// passwordParam is a password given as a query parameter, which pgx accepts.
var passwordParam = regexp.MustCompile(`(?i)([?&]password=)[^&#]*`)

// Redact returns a store URL with its password hidden, for logs and errors,
// whatever characters the password holds. It does not trust url.Parse: a
// password holding '#', '/', '?', a space or a bad %-escape either fails to
// parse or lands outside the user info, and would be shown as typed.
// Instead everything between the user name and the last '@' is blanked,
// which may blank more than the password but never less.
func Redact(raw string) string {
	scheme, rest, ok := strings.Cut(raw, ":")
	if !ok {
		return passwordParam.ReplaceAllString(raw, "${1}xxxxx")
	}
	slashes := ""
	if r, ok := strings.CutPrefix(rest, "//"); ok {
		slashes, rest = "//", r
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if user, _, hasPass := strings.Cut(rest[:at], ":"); hasPass {
			rest = user + ":xxxxx" + rest[at:]
		}
	}
	return passwordParam.ReplaceAllString(scheme+":"+slashes+rest, "${1}xxxxx")
}
