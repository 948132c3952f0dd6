package runtime

import "github.com/acemq/acemq-flow/runtime/broker"

// brokerURLs returns the broker URLs of AMQPURL (split at its commas) and
// AMQPURLs, in that order.
func (o Options) brokerURLs() []string {
	urls := broker.SplitURLs(o.AMQPURL)
	for _, u := range o.AMQPURLs {
		urls = append(urls, broker.SplitURLs(u)...)
	}
	return urls
}
