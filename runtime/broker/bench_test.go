package broker

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/testenv"
	amqp "github.com/rabbitmq/amqp091-go"
)

// BenchmarkHop measures one pipeline hop (consume, publish to the next queue
// with a confirm, acknowledge the input on the confirm) on quorum queues with
// 1 KiB bodies and prefetch 256: first with raw amqp091-go, then through
// Consumer and Publisher. It prints the medians of three rounds:
//
//	bench: hop-raw <n> msgs/s
//	bench: hop-broker <n> msgs/s raw=<n> ratio=<x.xx>
func BenchmarkHop(b *testing.B) {
	url := testenv.AMQP(b)
	ns := testenv.Names(b)
	const (
		n        = 3000
		rounds   = 3
		prefetch = 256
	)
	ctx := context.Background()
	open := func(role string) *Conn {
		c, err := Open(ctx, url, ConnOptions{Name: ns + "-" + role})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return c
	}
	admin := open("admin")
	topo := NewTopology(admin, nil)
	b.Cleanup(func() { topo.Close() })
	src, dst := ns+"-src", ns+"-dst"
	for _, q := range []string{src, dst} {
		if err := topo.DeclareQueue(ctx, Queue{Name: q, Durable: true, Args: map[string]any{"x-queue-type": "quorum"}}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { topo.DeleteQueue(context.Background(), q) })
	}
	pubConn, consConn := open("pub"), open("consume")
	pub, err := OpenPublisher(ctx, pubConn, PublisherOptions{Window: prefetch})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pub.Close() })
	body := make([]byte, 1024)

	preload := func() {
		done := make(chan error, n)
		for i := range n {
			m := Message{RoutingKey: src, Publishing: amqp.Publishing{MessageId: strconv.Itoa(i), Body: body}}
			if err := pub.PublishFunc(ctx, m, func(err error) { done <- err }); err != nil {
				b.Fatal(err)
			}
		}
		for range n {
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		}
		if _, err := purge(ctx, admin, dst); err != nil {
			b.Fatal(err)
		}
	}

	var raw, ours []float64
	for range rounds {
		preload()
		raw = append(raw, rawHop(b, url, ns, src, dst, n, prefetch))
		preload()
		ours = append(ours, brokerHop(b, consConn, pub, src, dst, n, prefetch))
	}
	r, o := median(raw), median(ours)
	fmt.Printf("bench: hop-raw %.0f msgs/s\n", r)
	fmt.Printf("bench: hop-broker %.0f msgs/s raw=%.0f ratio=%.2f\n", o, r, o/r)
	b.ReportMetric(o, "msgs/s")
	b.ReportMetric(o/r, "ratio")
}

// rawHop is the reference: amqp091-go used directly, the input acknowledged
// when the output's confirm arrives.
func rawHop(b *testing.B, url, ns, src, dst string, n, prefetch int) float64 {
	b.Helper()
	cc, err := amqp.DialConfig(url, amqp.Config{Properties: amqp.Table{"connection_name": ns + "-raw-consume"}})
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	pc, err := amqp.DialConfig(url, amqp.Config{Properties: amqp.Table{"connection_name": ns + "-raw-pub"}})
	if err != nil {
		b.Fatal(err)
	}
	defer pc.Close()
	cch, _ := cc.Channel()
	pch, _ := pc.Channel()
	if err := cch.Qos(prefetch, 0, false); err != nil {
		b.Fatal(err)
	}
	if err := pch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	confirms := pch.NotifyPublish(make(chan amqp.Confirmation, prefetch+1))
	tags := make(chan uint64, prefetch+1)
	done := make(chan struct{})
	go func() {
		count := 0
		for c := range confirms {
			tag := <-tags
			if c.Ack {
				cch.Ack(tag, false)
			} else {
				cch.Nack(tag, false, true)
			}
			if count++; count == n {
				close(done)
			}
		}
	}()
	dels, err := cch.Consume(src, "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	go func() {
		for d := range dels {
			tags <- d.DeliveryTag
			if _, err := pch.PublishWithDeferredConfirm("", dst, true, false, amqp.Publishing{
				MessageId: d.MessageId, Body: d.Body, DeliveryMode: amqp.Persistent,
			}); err != nil {
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		b.Fatal("raw hop did not finish within 60s")
	}
	return float64(n) / time.Since(start).Seconds()
}

// brokerHop is the same hop through Consumer and Publisher.
func brokerHop(b *testing.B, conn *Conn, pub *Publisher, src, dst string, n, prefetch int) float64 {
	b.Helper()
	c := NewConsumer(conn, ConsumerOptions{Queue: src, Prefetch: prefetch})
	ctx, cancel := context.WithCancel(context.Background())
	var count atomic.Int64
	done := make(chan struct{})
	res := make(chan error, 1)
	start := time.Now()
	go func() {
		res <- c.Run(ctx, func(ctx context.Context, d *Delivery) {
			m := Message{RoutingKey: dst, Publishing: amqp.Publishing{MessageId: d.MessageId, Body: d.Body}}
			err := pub.PublishFunc(ctx, m, func(err error) {
				if err != nil {
					d.Nack(true)
					return
				}
				d.Ack()
				if count.Add(1) == int64(n) {
					close(done)
				}
			})
			if err != nil {
				d.Nack(true)
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		b.Fatal("broker hop did not finish within 60s")
	}
	rate := float64(n) / time.Since(start).Seconds()
	cancel()
	if err := <-res; err != nil {
		b.Fatal(err)
	}
	return rate
}

func purge(ctx context.Context, c *Conn, queue string) (int, error) {
	ch, err := c.Channel(ctx)
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	return ch.QueuePurge(queue, false)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
