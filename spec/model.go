package spec

import (
	"encoding/json"
	"fmt"
	"time"
)

// Version is the prefix every flow file's top-level `version` starts with.
const Version = "acemq.flow/v1"

// Pos is a position in a flow file: the file as it was named to Load, and the
// 1-based line and column of the first character of a key or value.
type Pos struct {
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
	Col  int    `json:"col,omitempty"`
}

// String renders the position as file:line:col, the prefix of every
// diagnostic and of runtime errors that point back at a flow file.
func (p Pos) String() string {
	if p.Line == 0 {
		return p.File
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
}

// Set is what Load returns: the flows of every file read, in the order the
// files were found, with the warnings and notices that did not stop loading.
type Set struct {
	Flows    []*Flow
	Warnings Diagnostics // warnings only; errors make Load fail
	Notices  []string    // e.g. a file in a folder skipped for its version
}

// Flow is one validated flow file with every default filled in.
type Flow struct {
	Pos
	File        string       `yaml:"-"` // the file as named to Load
	Dir         string       `yaml:"-"` // its folder, in the same form
	Version     string       `yaml:"version"`
	Name        string       `yaml:"name"`
	Defaults    Defaults     `yaml:"defaults"`
	Plugins     []*Plugin    `yaml:"plugins"`   // sorted by name
	Types       []*Type      `yaml:"types"`     // sorted by name
	Pipelines   []*Pipeline  `yaml:"pipelines"` // in file order
	Itineraries []*Itinerary `yaml:"itineraries"`
	Consumers   []*Consumer  `yaml:"consumers"`
	Sagas       []*Saga      `yaml:"sagas"`
	Schedules   []*Schedule  `yaml:"schedules"`
	Topology    Topology     `yaml:"topology"`
	plugins     map[string]*Plugin
	types       map[string]*Type
}

// Plugin returns the plugin declared in this file under name, or nil.
func (f *Flow) Plugin(name string) *Plugin { return f.plugins[name] }

// Type returns the payload type declared in this file under name, or nil.
func (f *Flow) Type(name string) *Type { return f.types[name] }

// Defaults are the consumer settings every pipeline step and consumer of a
// file inherits unless it sets its own.
type Defaults struct {
	Pos
	QueueType   string `yaml:"queue_type"` // quorum | classic
	Prefetch    int    `yaml:"prefetch"`
	Concurrency int    `yaml:"concurrency"`
	Idempotent  bool   `yaml:"idempotent"`
	Retry       Retry  `yaml:"retry"`
	// ClaimCheck is the file's claim-check threshold (FLOW-FORMAT §6),
	// DefaultClaimCheckAbove unless set; a type may set its own.
	ClaimCheck ClaimCheck `yaml:"claim_check"`
}

// Retry is a retry ladder policy (FLOW-FORMAT §2): MaxAttempts counts
// deliveries, the first included; the delay before retry n is
// InitialDelay × 2^(n-1), capped at MaxDelay, shortened by up to Jitter.
type Retry struct {
	Pos
	MaxAttempts  int           `yaml:"max_attempts" json:"max_attempts"`
	InitialDelay time.Duration `yaml:"initial_delay" json:"initial_delay"`
	MaxDelay     time.Duration `yaml:"max_delay" json:"max_delay"`
	Jitter       float64       `yaml:"jitter" json:"jitter"`
}

// DefaultRetry is the built-in policy for a consumer with no `retry:` in a
// file with no `defaults.retry`.
var DefaultRetry = Retry{MaxAttempts: 5, InitialDelay: 2 * time.Second, MaxDelay: 30 * time.Second, Jitter: 0.2}

// Built-in consumer defaults, used where neither the consumer nor the file's
// `defaults` set a value.
const (
	DefaultQueueType   = "quorum"
	DefaultPrefetch    = 20
	DefaultConcurrency = 1
	DefaultTimeout     = 30 * time.Second
)

// Plugin is an out-of-process step handler binary, scoped to the file that
// declares it.
type Plugin struct {
	Pos
	Name    string            `yaml:"-"`
	Command string            `yaml:"command"` // as written
	Path    string            `yaml:"-"`       // Command resolved against the flow file's folder
	Dir     string            `yaml:"-"`       // the flow file's folder, as an OS path: the process's working directory
	Args    []string          `yaml:"args"`
	Env     map[string]string `yaml:"env"`
	SHA256  string            `yaml:"sha256"`
	Timeout time.Duration     `yaml:"timeout"`
}

// Type is a payload contract: a JSON Schema 2020-12 document, inline or from
// a $ref file, compiled once at load time; or, with Avro set, an Avro
// schema (FLOW-FORMAT §6), parsed once at load time.
type Type struct {
	Pos
	Name   string          `yaml:"-"`
	Ref    string          `yaml:"$ref"` // the $ref as written, if any
	Schema json.RawMessage `yaml:"-"`    // the schema document, $ref resolved
	schema validator
	doc    any // Schema as decoded values, for checkRefs; nil once compiled

	// ClaimCheck is the type's own claim-check threshold, nil when it
	// takes the file's (Flow.ClaimCheckAbove); not part of Schema.
	ClaimCheck *ClaimCheck `yaml:"claim_check"`

	// Avro is the type's Avro schema when it is written `avro: …`
	// (FLOW-FORMAT §6), nil for a JSON Schema type; Schema then holds the
	// Avro schema as JSON.
	Avro *AvroSchema `yaml:"avro"`
	// Subject is an Avro type's registry subject: as written, or
	// `<flow>.<type>`; "" for a JSON Schema type.
	Subject    string `yaml:"subject"`
	SubjectPos Pos    `yaml:"-"`
}

// HandlerRef names a handler as `<plugin>.<handler>`.
type HandlerRef struct {
	Plugin  string `json:"plugin"`
	Handler string `json:"handler"`
}

// String renders the reference as written in a flow file.
func (h HandlerRef) String() string {
	if h.Plugin == "" && h.Handler == "" {
		return ""
	}
	return h.Plugin + "." + h.Handler
}

// Pipeline is a declared route of named steps, each its own queue and
// consumer group.
type Pipeline struct {
	Pos
	Name        string  `yaml:"name"`
	Description string  `yaml:"description"`
	Input       string  `yaml:"input"`
	InputPos    Pos     `yaml:"-"`
	Steps       []*Step `yaml:"steps"`
}

// Step is one stage of a pipeline. Input is the previous step's Output (or
// the pipeline's Input for the first step); Output "none" means the step
// returns nothing. Empty Input or Output means any JSON value, unchecked.
// Delay is how long after the previous step finished its output is
// delivered to this step, through the broker's delay ladder (FLOW-FORMAT
// §4): rounded up to whole seconds, never early, at most MaxDelay; not on a
// pipeline's first step.
type Step struct {
	Pos
	Name        string        `yaml:"name"`
	Description string        `yaml:"description"`
	Handler     HandlerRef    `yaml:"handler"`
	HandlerPos  Pos           `yaml:"-"`
	Input       string        `yaml:"input"`
	InputPos    Pos           `yaml:"-"`
	Output      string        `yaml:"output"`
	OutputPos   Pos           `yaml:"-"`
	Retry       Retry         `yaml:"retry"`
	Prefetch    int           `yaml:"prefetch"`
	Concurrency int           `yaml:"concurrency"`
	Idempotent  bool          `yaml:"idempotent"`
	QueueType   string        `yaml:"queue_type"`
	Delay       time.Duration `yaml:"delay"`
	DelayPos    Pos           `yaml:"-"`
	AutoStartup bool          `yaml:"auto_startup"`
}

// OutputNone is the output type of a step that returns nothing.
const OutputNone = "none"

// Itinerary is a carried routing slip template: the stops a message visits,
// each kept or dropped per message by its `when` condition.
type Itinerary struct {
	Pos
	Name        string  `yaml:"name"`
	Description string  `yaml:"description"`
	Input       string  `yaml:"input"`
	InputPos    Pos     `yaml:"-"`
	Stops       []*Stop `yaml:"stops"`
}

// Stop is one entry of an itinerary.
type Stop struct {
	Pos
	Name       string    `yaml:"name"`
	Exchange   string    `yaml:"exchange"`
	RoutingKey string    `yaml:"routing_key"`
	When       Condition `yaml:"when"`
}

// Consumer is a queue consumed with a handler (the seed's listener).
type Consumer struct {
	Pos
	ID          string     `yaml:"id"`
	Description string     `yaml:"description"`
	Queue       string     `yaml:"queue"`
	QueuePos    Pos        `yaml:"-"`
	Handler     HandlerRef `yaml:"handler"`
	HandlerPos  Pos        `yaml:"-"`
	Input       string     `yaml:"input"`
	InputPos    Pos        `yaml:"-"`
	Output      string     `yaml:"output"`
	OutputPos   Pos        `yaml:"-"`
	Bind        []*Binding `yaml:"bind"`
	Declare     *Queue     `yaml:"declare"` // nil: the queue is provided elsewhere
	Prefetch    int        `yaml:"prefetch"`
	Concurrency int        `yaml:"concurrency"`
	AutoStartup bool       `yaml:"auto_startup"`
	Idempotent  bool       `yaml:"idempotent"`
	Retry       Retry      `yaml:"retry"`
}

// Binding binds a queue to an exchange with a routing key.
type Binding struct {
	Pos
	Exchange   string `yaml:"exchange"`
	RoutingKey string `yaml:"routing_key"`
}

// Queue is a queue declaration, under `topology.queues` or a consumer's
// `declare`. Arguments are typed as the broker wants them: whole numbers
// int64, true/false bool, everything else string.
type Queue struct {
	Pos
	Name       string         `yaml:"name"`
	Type       string         `yaml:"type"` // quorum | classic
	Arguments  map[string]any `yaml:"arguments"`
	DeadLetter bool           `yaml:"dead_letter"`
	argPos     map[string]Pos // where each argument's value is written
}

// argAt is where argument k's value is written, or the queue's position.
func (q *Queue) argAt(k string) Pos {
	if p, ok := q.argPos[k]; ok {
		return p
	}
	return q.Pos
}

// Saga is a durable sequence of steps with compensations, run in reverse when
// a later step fails (FLOW-FORMAT §5). Timeout (0: none) is how long an
// instance may run before it compensates, through the delay ladder: at most
// MaxDelay.
type Saga struct {
	Pos
	Name        string        `yaml:"name"`
	Description string        `yaml:"description"`
	Input       string        `yaml:"input"`
	InputPos    Pos           `yaml:"-"`
	Timeout     time.Duration `yaml:"timeout"`
	TimeoutPos  Pos           `yaml:"-"`
	Steps       []*SagaStep   `yaml:"steps"`
}

// SagaStep is one step of a saga. Output (empty: any JSON value) is the
// type its handler returns, what the saga records and gives its
// compensation; Retry is the retry ladder of its queue and of its
// compensation's (defaults.retry unless it sets its own).
type SagaStep struct {
	Pos
	Name          string     `yaml:"name"`
	Description   string     `yaml:"description"`
	Handler       HandlerRef `yaml:"handler"`
	HandlerPos    Pos        `yaml:"-"`
	Compensate    HandlerRef `yaml:"compensate"`
	CompensatePos Pos        `yaml:"-"`
	When          Condition  `yaml:"when"`
	Output        string     `yaml:"output"`
	OutputPos     Pos        `yaml:"-"`
	Retry         Retry      `yaml:"retry"`
}

// Schedule is a recurring send that fires exactly once per tick across
// replicas (FLOW-FORMAT §4). Exactly one of Cron and Every is set. Missed
// (default MissedLatest) says what a runtime does on recovery with the
// ticks that came due while none ran, looking back MissedWindow (default
// DefaultMissedWindow).
type Schedule struct {
	Pos
	Name         string        `yaml:"name"`
	Cron         string        `yaml:"cron"`
	Every        time.Duration `yaml:"every"`
	Timezone     string        `yaml:"timezone"`
	Missed       string        `yaml:"missed"`
	MissedPos    Pos           `yaml:"-"`
	MissedWindow time.Duration `yaml:"missed_window"`
	Send         Send          `yaml:"send"`
}

// What a schedule does with missed ticks, and how far back it looks by
// default.
const (
	MissedLatest        = "latest"
	MissedAll           = "all"
	MissedSkip          = "skip"
	DefaultMissedWindow = 24 * time.Hour
)

// Send says where a schedule (or `acemq-flow send`) publishes: an exchange
// and routing key, or the entry of a pipeline, itinerary or saga.
type Send struct {
	Pos
	Exchange   string          `yaml:"exchange"`
	RoutingKey string          `yaml:"routing_key"`
	Pipeline   string          `yaml:"pipeline"`
	Itinerary  string          `yaml:"itinerary"`
	Saga       string          `yaml:"saga"`
	Payload    json.RawMessage `yaml:"payload"`
}

// Topology is what a file declares on the broker beyond its pipelines and
// consumers, and how declarations are applied.
type Topology struct {
	Pos
	Apply        string      `yaml:"apply"`         // create-only | validate | dry-run
	MissingQueue string      `yaml:"missing_queue"` // fail | warn
	Exchanges    []*Exchange `yaml:"exchanges"`
	Queues       []*Queue    `yaml:"queues"`
}

// Topology apply modes and missing-queue policies.
const (
	ApplyCreateOnly = "create-only"
	ApplyValidate   = "validate"
	ApplyDryRun     = "dry-run"
	MissingFail     = "fail"
	MissingWarn     = "warn"
)

// Exchange is an exchange declaration.
type Exchange struct {
	Pos
	Name string `yaml:"name"`
	Type string `yaml:"type"` // direct | topic | fanout | headers
}
