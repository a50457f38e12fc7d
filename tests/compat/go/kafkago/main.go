// segmentio/kafka-go (github.com/segmentio/kafka-go) in the compat matrix: the roundtrip,
// case and admin modes of internal/compat, with kafka.Writer for producing, kafka.Reader
// for consuming and kafka.Client for the admin requests. kafka-go has no idempotent producer
// (it never sends InitProducerId) and its Reader has no revoke callback, so it has no member
// mode: a record it already fetched from a revoked partition can still be handed out after
// the partition moved, and exactly-once across a leave is not a guarantee it makes.
package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"purgatory-proxy/compat-go/internal/compat"
)

func main() {
	compat.Main("kafka-go", compat.Modes{
		Roundtrip: roundtrip,
		Case:      runCase,
		Admin:     admin,
	})
}

func mechanism(o compat.Options) sasl.Mechanism {
	if o.SASL == nil {
		return nil
	}
	switch o.SASL.Mechanism {
	case "PLAIN":
		return plain.Mechanism{Username: o.SASL.User, Password: o.SASL.Password}
	case "SCRAM-SHA-256", "SCRAM-SHA-512":
		algorithm := scram.SHA512
		if o.SASL.Mechanism == "SCRAM-SHA-256" {
			algorithm = scram.SHA256
		}
		m, err := scram.Mechanism(algorithm, o.SASL.User, o.SASL.Password)
		if err != nil {
			compat.Fail("setup", err)
		}
		return m
	}
	compat.Fail("setup", fmt.Errorf("SASL mechanism %q", o.SASL.Mechanism))
	return nil
}

func transport(o compat.Options) *kafka.Transport {
	return &kafka.Transport{TLS: o.TLS, SASL: mechanism(o), ClientID: "compat-kafka-go"}
}

func dialer(o compat.Options) *kafka.Dialer {
	return &kafka.Dialer{Timeout: 10 * time.Second, TLS: o.TLS, SASLMechanism: mechanism(o), ClientID: "compat-kafka-go"}
}

func newClient(o compat.Options) *kafka.Client {
	return &kafka.Client{Addr: kafka.TCP(o.Bootstrap...), Transport: transport(o), Timeout: 30 * time.Second}
}

func createTopic(ctx context.Context, cl *kafka.Client, name string, partitions int, configs map[string]string) {
	topic := kafka.TopicConfig{Topic: name, NumPartitions: partitions, ReplicationFactor: 1}
	for k, v := range configs {
		topic.ConfigEntries = append(topic.ConfigEntries, kafka.ConfigEntry{ConfigName: k, ConfigValue: v})
	}
	resp, err := cl.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{topic}})
	if err == nil {
		err = resp.Errors[name]
	}
	if err != nil {
		compat.Fail("create", fmt.Errorf("%s: %w", name, err))
	}
}

// write produces messages with acks=all and returns them as the Writer's Completion saw
// them (partition and offset set from the Produce responses).
func write(ctx context.Context, o compat.Options, w *kafka.Writer, messages []kafka.Message) []kafka.Message {
	var done []kafka.Message
	var mu sync.Mutex // the Writer calls Completion from one goroutine per partition
	w.Addr = kafka.TCP(o.Bootstrap...)
	w.Transport = transport(o)
	w.RequiredAcks = kafka.RequireAll
	w.Completion = func(ms []kafka.Message, err error) {
		if err == nil {
			mu.Lock()
			done = append(done, ms...)
			mu.Unlock()
		}
	}
	// A new topic's leaders take a moment to be known everywhere (200 partitions: seconds).
	w.MaxAttempts = 20
	w.WriteBackoffMin = 100 * time.Millisecond
	w.WriteBackoffMax = time.Second
	if err := w.WriteMessages(ctx, messages...); err != nil {
		compat.Fail("produce", err)
	}
	if err := w.Close(); err != nil {
		compat.Fail("produce", err)
	}
	if len(done) != len(messages) {
		compat.Fail("produce", fmt.Errorf("%d of %d messages acknowledged", len(done), len(messages)))
	}
	return done
}

// roundtrip: acks=all producer (not idempotent: kafka-go has none), then a group Reader
// that fetches every record and commits them (CommitMessages, synchronous) before it closes.
func roundtrip(o compat.Options) {
	ctx, cancel := context.WithDeadline(context.Background(), o.Deadline)
	defer cancel()
	createTopic(ctx, newClient(o), o.Topic, o.Partitions, nil)
	compat.Line("created", o.Topic)
	var messages []kafka.Message
	for _, kv := range compat.StdinRecords() {
		messages = append(messages, kafka.Message{Key: []byte(kv[0]), Value: []byte(kv[1])})
	}
	// Hash: the FNV-1a key partitioner sarama uses too, so one key stays on one partition.
	written := write(ctx, o, &kafka.Writer{Topic: o.Topic, Balancer: &kafka.Hash{}, BatchTimeout: 5 * time.Millisecond}, messages)
	for _, m := range written {
		compat.Line("produced", m.Partition, m.Offset, string(m.Key), string(m.Value))
	}
	reader := kafka.NewReader(kafka.ReaderConfig{
		Brokers:           o.Bootstrap,
		GroupID:           o.Group,
		Topic:             o.Topic,
		StartOffset:       kafka.FirstOffset,
		SessionTimeout:    o.SessionTimeout,
		HeartbeatInterval: o.SessionTimeout / 4,
		CommitInterval:    0, // CommitMessages commits synchronously
		Dialer:            dialer(o),
		MaxWait:           500 * time.Millisecond,
	})
	var fetched []kafka.Message
	for len(fetched) < len(messages) {
		m, err := reader.FetchMessage(ctx)
		if err != nil {
			compat.Fail("consume", fmt.Errorf("%d of %d records: %w", len(fetched), len(messages), err))
		}
		compat.Line("consumed", m.Partition, m.Offset, string(m.Key), string(m.Value))
		fetched = append(fetched, m)
	}
	if err := reader.CommitMessages(ctx, fetched...); err != nil {
		compat.Fail("consume", fmt.Errorf("commit: %w", err))
	}
	if err := reader.Close(); err != nil { // leaves the group
		compat.Fail("consume", fmt.Errorf("close: %w", err))
	}
}

var codecs = map[string]kafka.Compression{
	"gzip": kafka.Gzip, "snappy": kafka.Snappy, "lz4": kafka.Lz4, "zstd": kafka.Zstd,
}

func headersOf(hs []kafka.Header) [][2]string {
	out := [][2]string{}
	for _, h := range hs {
		out = append(out, [2]string{h.Key, string(h.Value)})
	}
	return out
}

// byPartitionField sends a message to the partition it names (the partitions case).
var byPartitionField = kafka.BalancerFunc(func(m kafka.Message, _ ...int) int { return m.Partition })

// runCase produces every topic of the case with its codec and limits, then reads every
// partition from the first offset with one Reader per partition (no group) up to the last
// offsets listed after producing.
func runCase(o compat.Options) {
	ctx, cancel := context.WithDeadline(context.Background(), o.Deadline)
	defer cancel()
	topics := compat.Topics(o.Case, o.Topic, o.RunID)
	cl := newClient(o)
	for _, t := range topics {
		createTopic(ctx, cl, t.Name, int(t.Partitions), t.Configs)
		compat.Note("created", t.Name, "")
	}
	for _, t := range topics {
		w := &kafka.Writer{Topic: t.Name, Balancer: &kafka.Hash{}, BatchTimeout: 5 * time.Millisecond}
		if t.Compression != "" {
			w.Compression = codecs[t.Compression]
		}
		if t.Explicit() {
			w.Balancer = byPartitionField
		}
		if t.Large() {
			w.BatchBytes = compat.LargeLimitBytes
		}
		var messages []kafka.Message
		for _, r := range t.Records {
			m := kafka.Message{Partition: int(r.Partition), Key: r.Key, Value: r.Value}
			for _, h := range r.Headers {
				m.Headers = append(m.Headers, kafka.Header{Key: h.Key, Value: []byte(h.Value)})
			}
			messages = append(messages, m)
		}
		for _, m := range write(ctx, o, w, messages) {
			compat.Produced(t.Name, int32(m.Partition), m.Offset, m.Key, m.Value, headersOf(m.Headers))
		}
	}
	for _, t := range topics {
		requests := make([]kafka.OffsetRequest, t.Partitions)
		for p := range requests {
			requests[p] = kafka.LastOffsetOf(p)
		}
		listed, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{t.Name: requests}})
		if err != nil {
			compat.Fail("consume", err)
		}
		// One Reader per partition, a few at a time: a Reader takes a moment to start, and
		// 200 of them one after another take over a minute.
		var wg sync.WaitGroup
		slots := make(chan struct{}, 20)
		for _, po := range listed.Topics[t.Name] {
			if po.Error != nil {
				compat.Fail("consume", po.Error)
			}
			if po.LastOffset == 0 {
				continue
			}
			wg.Add(1)
			slots <- struct{}{}
			go func(partition int, end int64) {
				defer func() { <-slots; wg.Done() }()
				readPartition(ctx, o, t.Name, partition, end)
			}(po.Partition, po.LastOffset)
		}
		wg.Wait()
	}
}

func readPartition(ctx context.Context, o compat.Options, topic string, partition int, end int64) {
	reader := kafka.NewReader(kafka.ReaderConfig{
		Brokers:   o.Bootstrap,
		Topic:     topic,
		Partition: partition,
		MaxBytes:  compat.LargeLimitBytes,
		MaxWait:   500 * time.Millisecond,
		Dialer:    dialer(o),
	})
	defer reader.Close()
	for {
		m, err := reader.ReadMessage(ctx)
		if err != nil {
			compat.Fail("consume", fmt.Errorf("%s/%d: %w", topic, partition, err))
		}
		compat.Consumed(m.Topic, int32(m.Partition), m.Offset, m.Key, m.Value, headersOf(m.Headers))
		if m.Offset+1 >= end {
			return
		}
	}
}

// admin: the admin round with kafka.Client, one step at a time.
func admin(o compat.Options) {
	ctx, cancel := context.WithDeadline(context.Background(), o.Deadline)
	defer cancel()
	cl := newClient(o)
	createTopic(ctx, cl, o.Topic, 1, nil)
	compat.Step("created", o.Topic, "")
	compat.Step("config", o.Topic, "retention.ms="+topicConfig(ctx, cl, o.Topic, "retention.ms"))
	altered, err := cl.IncrementalAlterConfigs(ctx, &kafka.IncrementalAlterConfigsRequest{
		Resources: []kafka.IncrementalAlterConfigsRequestResource{{
			ResourceType: kafka.ResourceTypeTopic, ResourceName: o.Topic,
			Configs: []kafka.IncrementalAlterConfigsRequestConfig{{Name: "retention.ms", Value: "3600000", ConfigOperation: kafka.ConfigOperationSet}},
		}},
	})
	if err == nil {
		for _, r := range altered.Resources {
			err = errors.Join(err, r.Error)
		}
	}
	if err != nil {
		compat.Fail("admin", fmt.Errorf("alter configs: %w", err))
	}
	compat.Step("altered", o.Topic, "")
	compat.Step("described", o.Topic, "retention.ms="+topicConfig(ctx, cl, o.Topic, "retention.ms"))
	created, err := cl.CreateACLs(ctx, &kafka.CreateACLsRequest{ACLs: []kafka.ACLEntry{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: o.Topic, ResourcePatternType: kafka.PatternTypeLiteral,
		Principal: o.Principal, Host: "*", Operation: kafka.ACLOperationTypeRead, PermissionType: kafka.ACLPermissionTypeAllow,
	}}})
	if err == nil {
		err = errors.Join(created.Errors...)
	}
	if err != nil {
		compat.Fail("admin", fmt.Errorf("create ACL: %w", err))
	}
	compat.Step("acl-created", o.Topic, o.Principal)
	described, err := cl.DescribeACLs(ctx, &kafka.DescribeACLsRequest{Filter: kafka.ACLFilter{
		ResourceTypeFilter: kafka.ResourceTypeTopic, ResourceNameFilter: o.Topic, ResourcePatternTypeFilter: kafka.PatternTypeLiteral,
		Operation: kafka.ACLOperationTypeAny, PermissionType: kafka.ACLPermissionTypeAny,
	}})
	if err == nil {
		err = described.Error
	}
	if err != nil {
		compat.Fail("admin", fmt.Errorf("describe ACLs: %w", err))
	}
	var found []string
	for _, r := range described.Resources {
		for _, a := range r.ACLs {
			found = append(found, fmt.Sprintf("%s %s %s %s", a.Principal, a.Host, strings.ToUpper(a.Operation.String()), r.ResourceName))
		}
	}
	sort.Strings(found)
	compat.Step("acls", o.Topic, strings.Join(found, "; "))
	deleted, err := cl.DeleteACLs(ctx, &kafka.DeleteACLsRequest{Filters: []kafka.DeleteACLsFilter{{
		ResourceTypeFilter: kafka.ResourceTypeTopic, ResourceNameFilter: o.Topic, ResourcePatternTypeFilter: kafka.PatternTypeLiteral,
		Operation: kafka.ACLOperationTypeAny, PermissionType: kafka.ACLPermissionTypeAny,
	}}})
	count := 0
	if err == nil {
		for _, r := range deleted.Results {
			err = errors.Join(err, r.Error)
			count += len(r.MatchingACLs)
		}
	}
	if err != nil {
		compat.Fail("admin", fmt.Errorf("delete ACLs: %w", err))
	}
	compat.Step("acl-deleted", o.Topic, strconv.Itoa(count))
	dropped, err := cl.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{o.Topic}})
	if err == nil {
		err = dropped.Errors[o.Topic]
	}
	if err != nil {
		compat.Fail("admin", fmt.Errorf("delete topic: %w", err))
	}
	compat.Step("deleted", o.Topic, "")
}

func topicConfig(ctx context.Context, cl *kafka.Client, topic, name string) string {
	resp, err := cl.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: topic, ConfigNames: []string{name},
	}}})
	if err != nil {
		compat.Fail("admin", fmt.Errorf("describe configs: %w", err))
	}
	for _, r := range resp.Resources {
		if r.Error != nil {
			compat.Fail("admin", fmt.Errorf("describe configs: %w", r.Error))
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName == name {
				return e.ConfigValue
			}
		}
	}
	return ""
}
