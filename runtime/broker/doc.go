// Package broker is the AMQP layer of the acemq-flow runtime: supervised
// connections, confirmed publishing, consumers that survive reconnects, and
// topology declaration with checks a person can read. It knows queues,
// exchanges and messages; it does not know flows, steps or wire names, which
// belong to package runtime.
//
// It imports only amqp091-go and the standard library, and uses its own
// supervisor rather than the library's built-in recovery, because what happens
// to in-flight deliveries and confirms after a reconnect is a decision of the
// runtime (unacknowledged deliveries are requeued by the broker; old delivery
// tags are invalid).
//
// A caller uses it in this order:
//
//  1. Open two connections, one for publishing and one for consuming
//     (Open, or OpenURLs with every node of a cluster). Each reconnects by
//     itself until Close, to the next URL when it has several.
//  2. Check the topology, then declare it (NewTopology; Topology.Check for
//     topology.apply validate, which creates nothing; Topology.CheckDrift
//     before Topology.Declare, so that drift stops a start before anything
//     is declared; Topology.CheckQueues for queues others provide). A check
//     reads types, arguments and bindings through the management API
//     (ConnOptions.Management) when it answers, and from the broker's
//     refusals when it does not.
//  3. Open a Publisher on the publishing connection (OpenPublisher).
//  4. Run a Consumer per queue on the consuming connection (NewConsumer,
//     Consumer.Run). A handler that produces output publishes it with
//     Publisher.PublishFunc or Publisher.PublishAsync and acknowledges its
//     Delivery only when that publish succeeded, so a message is never
//     acknowledged before what it produced is confirmed and routed.
//  5. Cancel the consumers' context to drain them, then Close the publisher
//     and the connections.
//
// Errors: a publish that did not reach a queue returns *UnroutableError; a
// broker nack returns *NackError; a publish whose outcome is unknown (the
// channel or connection died, the caller's deadline passed) returns
// *IndeterminateError and should be retried with the same message id. A
// declaration the broker refuses because the existing entity differs returns
// *DriftError, naming every setting that differs; Check and CheckDrift
// return one *TopologyError naming every missing or differing exchange,
// queue and binding; CheckQueues returns one *MissingQueuesError naming every
// missing queue.
package broker
