package proto

// The go-plugin handshake values both sides must agree on. A plugin in any
// language checks that the environment variable MagicCookieKey holds
// MagicCookieValue before it serves (so that running the binary by hand
// explains itself instead of waiting for a host), and announces
// ProtocolVersion as the APP-PROTOCOL-VERSION of its handshake line
// (plugins/README.md).
const (
	// ProtocolVersion is the application protocol version of the Plugin
	// service. It changes only when a change to plugin.proto is not
	// backwards compatible.
	ProtocolVersion = 1

	// MagicCookieKey is the environment variable the host sets for a plugin.
	MagicCookieKey = "ACEMQ_FLOW_PLUGIN"

	// MagicCookieValue is the value of MagicCookieKey.
	MagicCookieValue = "8f3c1e0a4b7d4e2a9c6b5d1f0e7a3c92"

	// PluginName is the name under which a plugin registers the Plugin
	// service in go-plugin's plugin set; host and SDK use it to dispense.
	PluginName = "acemq"
)
