// The franz-go client (github.com/twmb/franz-go) in the compat matrix: every mode of
// internal/compat, with kgo for producing and consuming and kadm for the admin steps.
//
// franz-go is the client that broke Kroxylicious (its issue 2450): it opens every connection
// with ApiVersions v5 (KIP-1242), which Kafka 3.9 does not know; the broker answers with a v0
// UNSUPPORTED_VERSION response listing its own range, and a proxy that re-encodes that answer
// at v5 hands franz-go bytes it cannot parse. The matrix runs this program through the proxy
// in front of Kafka 3.9.2 for that reason.
package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"purgatory-proxy/compat-go/internal/compat"
)

func main() {
	compat.Main("franz-go", compat.Modes{
		Roundtrip: roundtrip,
		Case:      runCase,
		Admin:     admin,
		Member:    member,
	})
}

// connection is every client's connection options: seeds, TLS, SASL.
func connection(o compat.Options) []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(o.Bootstrap...), kgo.ClientID("compat-franz")}
	if o.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(o.TLS))
	}
	if o.SASL != nil {
		switch o.SASL.Mechanism {
		case "PLAIN":
			opts = append(opts, kgo.SASL(plain.Auth{User: o.SASL.User, Pass: o.SASL.Password}.AsMechanism()))
		case "SCRAM-SHA-256":
			opts = append(opts, kgo.SASL(scram.Auth{User: o.SASL.User, Pass: o.SASL.Password}.AsSha256Mechanism()))
		case "SCRAM-SHA-512":
			opts = append(opts, kgo.SASL(scram.Auth{User: o.SASL.User, Pass: o.SASL.Password}.AsSha512Mechanism()))
		default:
			compat.Fail("setup", fmt.Errorf("SASL mechanism %q", o.SASL.Mechanism))
		}
	}
	return opts
}

func client(stage string, opts ...kgo.Opt) *kgo.Client {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		compat.Fail(stage, err)
	}
	return cl
}

func createTopic(ctx context.Context, adm *kadm.Client, name string, partitions int32, configs map[string]string) {
	var cfg map[string]*string
	if len(configs) > 0 {
		cfg = map[string]*string{}
		for k, v := range configs {
			cfg[k] = &v
		}
	}
	if _, err := adm.CreateTopic(ctx, partitions, 1, cfg, name); err != nil {
		compat.Fail("create", fmt.Errorf("%s: %w", name, err))
	}
}

// roundtrip: idempotent acks=all producer (franz-go's default), a group consumer that
// commits what it consumed before it leaves.
func roundtrip(o compat.Options) {
	ctx, cancel := context.WithDeadline(context.Background(), o.Deadline)
	defer cancel()
	base := connection(o)
	cl := client("setup", base...)
	createTopic(ctx, kadm.NewClient(cl), o.Topic, int32(o.Partitions), nil)
	compat.Line("created", o.Topic)

	var records []*kgo.Record
	for _, kv := range compat.StdinRecords() {
		records = append(records, &kgo.Record{Topic: o.Topic, Key: []byte(kv[0]), Value: []byte(kv[1])})
	}
	if err := cl.ProduceSync(ctx, records...).FirstErr(); err != nil {
		compat.Fail("produce", err)
	}
	for _, r := range records {
		compat.Line("produced", r.Partition, r.Offset, string(r.Key), string(r.Value))
	}
	cl.Close()

	consumer := client("consume", append(base,
		kgo.ConsumerGroup(o.Group),
		kgo.ConsumeTopics(o.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(o.SessionTimeout),
		kgo.HeartbeatInterval(o.SessionTimeout/4),
		kgo.DisableAutoCommit(),
	)...)
	seen := 0
	for seen < len(records) {
		fetches := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			compat.Fail("consume", fmt.Errorf("%d of %d records by the deadline", seen, len(records)))
		}
		fetches.EachError(func(t string, p int32, err error) { compat.Fail("consume", fmt.Errorf("%s/%d: %w", t, p, err)) })
		fetches.EachRecord(func(r *kgo.Record) {
			compat.Line("consumed", r.Partition, r.Offset, string(r.Key), string(r.Value))
			seen++
		})
	}
	if err := consumer.CommitUncommittedOffsets(ctx); err != nil {
		compat.Fail("consume", fmt.Errorf("commit: %w", err))
	}
	consumer.Close() // leaves the group
}

var codecs = map[string]kgo.CompressionCodec{
	"gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
	"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
}

func headersOf(hs []kgo.RecordHeader) [][2]string {
	out := [][2]string{}
	for _, h := range hs {
		out = append(out, [2]string{h.Key, string(h.Value)})
	}
	return out
}

// runCase produces every topic of the case with its codec and limits, then reads every
// partition from the start, without a group, up to the end offsets listed after producing.
func runCase(o compat.Options) {
	ctx, cancel := context.WithDeadline(context.Background(), o.Deadline)
	defer cancel()
	base := connection(o)
	topics := compat.Topics(o.Case, o.Topic, o.RunID)
	admin := client("setup", base...)
	adm := kadm.NewClient(admin)
	defer admin.Close()
	for _, t := range topics {
		createTopic(ctx, adm, t.Name, t.Partitions, t.Configs)
		compat.Note("created", t.Name, "")
	}
	for _, t := range topics {
		opts := append([]kgo.Opt{}, base...)
		if t.Compression != "" {
			opts = append(opts, kgo.ProducerBatchCompression(codecs[t.Compression]))
		}
		if t.Explicit() {
			opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		}
		if t.Large() {
			opts = append(opts, kgo.ProducerBatchMaxBytes(compat.LargeLimitBytes))
		}
		producer := client("produce", opts...)
		var records []*kgo.Record
		for _, r := range t.Records {
			record := &kgo.Record{Topic: t.Name, Partition: r.Partition, Key: r.Key, Value: r.Value}
			for _, h := range r.Headers {
				record.Headers = append(record.Headers, kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)})
			}
			records = append(records, record)
		}
		if err := producer.ProduceSync(ctx, records...).FirstErr(); err != nil {
			compat.Fail("produce", fmt.Errorf("%s: %w", t.Name, err))
		}
		for _, r := range records {
			compat.Produced(t.Name, r.Partition, r.Offset, r.Key, r.Value, headersOf(r.Headers))
		}
		producer.Close()
	}

	ends := compat.NewEnds()
	start := map[string]map[int32]kgo.Offset{}
	var names []string
	for _, t := range topics {
		names = append(names, t.Name)
	}
	listed, err := adm.ListEndOffsets(ctx, names...)
	if err != nil {
		compat.Fail("consume", err)
	}
	listed.Each(func(l kadm.ListedOffset) {
		if l.Err != nil {
			compat.Fail("consume", l.Err)
		}
		ends.Want(l.Topic, l.Partition, l.Offset)
		if start[l.Topic] == nil {
			start[l.Topic] = map[int32]kgo.Offset{}
		}
		start[l.Topic][l.Partition] = kgo.NewOffset().AtStart()
	})
	consumer := client("consume", append(base,
		kgo.ConsumePartitions(start),
		kgo.FetchMaxBytes(compat.LargeLimitBytes),
		kgo.FetchMaxPartitionBytes(compat.LargeLimitBytes),
	)...)
	defer consumer.Close()
	for !ends.Done() {
		fetches := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			compat.Fail("consume", fmt.Errorf("not every partition read to its end by the deadline"))
		}
		fetches.EachError(func(t string, p int32, err error) { compat.Fail("consume", fmt.Errorf("%s/%d: %w", t, p, err)) })
		fetches.EachRecord(func(r *kgo.Record) {
			compat.Consumed(r.Topic, r.Partition, r.Offset, r.Key, r.Value, headersOf(r.Headers))
			ends.Seen(r.Topic, r.Partition, r.Offset)
		})
	}
}

// member is one group member for the join-and-leave check: offsets of processed records are
// committed synchronously when partitions are revoked (BlockRebalanceOnPoll: never while a
// polled batch is being processed) and before it leaves.
func member(a compat.MemberArgs) {
	stop := compat.WaitForStop()
	var mu sync.Mutex
	processed := map[int32]int64{} // partition -> next offset to process
	commit := func(ctx context.Context, cl *kgo.Client, partitions []int32) {
		mu.Lock()
		offsets := map[int32]kgo.EpochOffset{}
		for _, p := range partitions {
			if next, ok := processed[p]; ok {
				offsets[p] = kgo.EpochOffset{Epoch: -1, Offset: next}
				delete(processed, p)
			}
		}
		mu.Unlock()
		if len(offsets) == 0 {
			return
		}
		var failed error
		cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{a.Topic: offsets},
			func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
				failed = err
				if err == nil {
					failed = firstCommitError(resp)
				}
			})
		if failed != nil {
			compat.Line("error", "commit: "+failed.Error())
			return
		}
		keys := make([]int32, 0, len(offsets))
		for p := range offsets {
			keys = append(keys, p)
		}
		sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
		for _, p := range keys {
			compat.Line("committed", p, offsets[p].Offset)
		}
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(a.Bootstrap...),
		kgo.ClientID("compat-franz-member"),
		kgo.ConsumerGroup(a.Group),
		kgo.ConsumeTopics(a.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		// Eager range assignment (classic): every member gives up all its partitions on a
		// rebalance. With the consumer protocol the broker assigns (RangeBalancer names the
		// server-side "range" assignor).
		kgo.Balancers(kgo.RangeBalancer()),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
			compat.Line("assigned", compat.JoinPartitions(assigned[a.Topic]))
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
			commit(ctx, cl, revoked[a.Topic])
			compat.Line("revoked", compat.JoinPartitions(revoked[a.Topic]))
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
			compat.Line("error", "lost "+compat.JoinPartitions(lost[a.Topic]))
		}),
	}
	switch a.Protocol {
	case "classic":
		opts = append(opts, kgo.SessionTimeout(a.SessionTimeout), kgo.HeartbeatInterval(a.SessionTimeout/4))
	case "consumer":
		opts = append(opts, kgo.ServerSideBalancer())
	default:
		compat.Fail("setup", fmt.Errorf("protocol %q (classic, consumer)", a.Protocol))
	}
	cl := client("setup", opts...)
	ctx := context.Background()
	for {
		select {
		case <-stop:
			assigned := []int32{}
			mu.Lock()
			for p := range processed {
				assigned = append(assigned, p)
			}
			mu.Unlock()
			commit(ctx, cl, assigned)
			cl.Close() // leaves the group
			compat.Line("closed")
			return
		default:
		}
		started := time.Now()
		pollCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		fetches := cl.PollRecords(pollCtx, 100)
		cancel()
		n := 0
		fetches.EachError(func(t string, p int32, err error) {
			if err != context.DeadlineExceeded {
				compat.Line("error", fmt.Sprintf("%s/%d: %v", t, p, err))
			}
		})
		fetches.EachRecord(func(r *kgo.Record) {
			compat.Line("consumed", r.Partition, r.Offset, string(r.Value))
			mu.Lock()
			processed[r.Partition] = r.Offset + 1
			mu.Unlock()
			n++
		})
		cl.AllowRebalance()
		compat.Pace(n, a.MaxRate, started)
	}
}

func firstCommitError(resp *kmsg.OffsetCommitResponse) error {
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				return fmt.Errorf("%s/%d: error code %d", t.Topic, p.Partition, p.ErrorCode)
			}
		}
	}
	return nil
}

// admin: the admin round, one step at a time (compat.Step waits for the driver's check).
func admin(o compat.Options) {
	ctx, cancel := context.WithDeadline(context.Background(), o.Deadline)
	defer cancel()
	cl := client("setup", connection(o)...)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	createTopic(ctx, adm, o.Topic, 1, nil)
	compat.Step("created", o.Topic, "")
	compat.Step("config", o.Topic, "retention.ms="+topicConfig(ctx, adm, o.Topic, "retention.ms"))
	altered, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: ptr("3600000")}}, o.Topic)
	if err == nil {
		_, err = altered.On(o.Topic, func(r *kadm.AlterConfigsResponse) error { return r.Err })
	}
	if err != nil {
		compat.Fail("admin", fmt.Errorf("alter configs: %w", err))
	}
	compat.Step("altered", o.Topic, "")
	compat.Step("described", o.Topic, "retention.ms="+topicConfig(ctx, adm, o.Topic, "retention.ms"))
	acl := kadm.NewACLs().Allow(o.Principal).AllowHosts("*").Topics(o.Topic).
		Operations(kadm.OpRead).ResourcePatternType(kadm.ACLPatternLiteral)
	created, err := adm.CreateACLs(ctx, acl)
	if err == nil {
		for _, c := range created {
			if c.Err != nil {
				err = c.Err
			}
		}
	}
	if err != nil {
		compat.Fail("admin", fmt.Errorf("create ACL: %w", err))
	}
	compat.Step("acl-created", o.Topic, o.Principal)
	filter := kadm.NewACLs().Topics(o.Topic).ResourcePatternType(kadm.ACLPatternLiteral).
		Operations(kadm.OpAny).AllowHosts().Allow().DenyHosts().Deny()
	described, err := adm.DescribeACLs(ctx, filter)
	if err != nil {
		compat.Fail("admin", fmt.Errorf("describe ACLs: %w", err))
	}
	var found []string
	for _, r := range described {
		if r.Err != nil {
			compat.Fail("admin", fmt.Errorf("describe ACLs: %w", r.Err))
		}
		for _, d := range r.Described {
			found = append(found, fmt.Sprintf("%s %s %s %s", d.Principal, d.Host, strings.ToUpper(d.Operation.String()), d.Name))
		}
	}
	sort.Strings(found)
	compat.Step("acls", o.Topic, strings.Join(found, "; "))
	deleted, err := adm.DeleteACLs(ctx, filter)
	count := 0
	for _, r := range deleted {
		if r.Err != nil && err == nil {
			err = r.Err
		}
		count += len(r.Deleted)
	}
	if err != nil {
		compat.Fail("admin", fmt.Errorf("delete ACLs: %w", err))
	}
	compat.Step("acl-deleted", o.Topic, strconv.Itoa(count))
	if _, err := adm.DeleteTopic(ctx, o.Topic); err != nil {
		compat.Fail("admin", fmt.Errorf("delete topic: %w", err))
	}
	compat.Step("deleted", o.Topic, "")
}

func topicConfig(ctx context.Context, adm *kadm.Client, topic, name string) string {
	configs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		compat.Fail("admin", fmt.Errorf("describe configs: %w", err))
	}
	rc, err := configs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		compat.Fail("admin", fmt.Errorf("describe configs: %w", err))
	}
	for _, c := range rc.Configs {
		if c.Key == name {
			return c.MaybeValue()
		}
	}
	return ""
}

func ptr(s string) *string { return &s }
