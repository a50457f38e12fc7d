// IBM/sarama (github.com/IBM/sarama) in the compat matrix: every mode of internal/compat.
// sarama speaks the Kafka version it is configured with (Version below: 3.9, a version both
// lines of Apache Kafka the tests run understand) and negotiates down with ApiVersions. It
// has no SCRAM of its own; github.com/xdg-go/scram is the client its documentation uses.
package main

import (
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"

	"purgatory-proxy/compat-go/internal/compat"
)

func main() {
	compat.Main("sarama", compat.Modes{
		Roundtrip: roundtrip,
		Case:      runCase,
		Admin:     admin,
		Member:    member,
	})
}

type scramClient struct {
	*scram.ClientConversation
	hash scram.HashGeneratorFcn
}

func (c *scramClient) Begin(user, password, authzID string) error {
	client, err := c.hash.NewClient(user, password, authzID)
	if err != nil {
		return err
	}
	c.ClientConversation = client.NewConversation()
	return nil
}

func (c *scramClient) Step(challenge string) (string, error) {
	return c.ClientConversation.Step(challenge)
}
func (c *scramClient) Done() bool { return c.ClientConversation.Done() }

// config is the settings every mode shares: version, TLS, SASL, acks=all.
func config(o compat.Options) *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V3_9_0_0
	c.ClientID = "compat-sarama"
	if o.TLS != nil {
		c.Net.TLS.Enable = true
		c.Net.TLS.Config = o.TLS
	}
	if o.SASL != nil {
		c.Net.SASL.Enable = true
		c.Net.SASL.Handshake = true
		c.Net.SASL.Mechanism = sarama.SASLMechanism(o.SASL.Mechanism)
		c.Net.SASL.User = o.SASL.User
		c.Net.SASL.Password = o.SASL.Password
		switch o.SASL.Mechanism {
		case sarama.SASLTypeSCRAMSHA256:
			c.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.HashGeneratorFcn(sha256.New)} }
		case sarama.SASLTypeSCRAMSHA512:
			c.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.HashGeneratorFcn(sha512.New)} }
		}
	}
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Return.Successes = true
	// The idempotent producer (KIP-98): sarama requires one request in flight for it.
	c.Producer.Idempotent = true
	c.Net.MaxOpenRequests = 1
	// A new topic's leaders take a moment to be known everywhere (200 partitions: seconds);
	// sarama's default of 3 retries 100 ms apart gives up before that.
	c.Producer.Retry.Max = 20
	c.Producer.Retry.Backoff = 250 * time.Millisecond
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.Return.Errors = true
	return c
}

func createTopic(adm sarama.ClusterAdmin, name string, partitions int32, configs map[string]string) {
	detail := &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}
	if len(configs) > 0 {
		detail.ConfigEntries = map[string]*string{}
		for k, v := range configs {
			detail.ConfigEntries[k] = &v
		}
	}
	if err := adm.CreateTopic(name, detail, false); err != nil {
		compat.Fail("create", fmt.Errorf("%s: %w", name, err))
	}
}

func clusterAdmin(o compat.Options, c *sarama.Config) sarama.ClusterAdmin {
	adm, err := sarama.NewClusterAdmin(o.Bootstrap, c)
	if err != nil {
		compat.Fail("setup", err)
	}
	return adm
}

func produce(o compat.Options, c *sarama.Config, messages []*sarama.ProducerMessage) {
	producer, err := sarama.NewSyncProducer(o.Bootstrap, c)
	if err != nil {
		compat.Fail("produce", err)
	}
	defer producer.Close()
	if err := producer.SendMessages(messages); err != nil {
		var errs sarama.ProducerErrors
		if errors.As(err, &errs) && len(errs) > 0 {
			err = fmt.Errorf("%w; first: %s/%d: %w", err, errs[0].Msg.Topic, errs[0].Msg.Partition, errs[0].Err)
		}
		compat.Fail("produce", err)
	}
}

// roundtrip: idempotent acks=all producer, then a group consumer (ConsumerGroup) that marks
// what it consumed and commits it (synchronously, in Cleanup) before it leaves.
func roundtrip(o compat.Options) {
	c := config(o)
	adm := clusterAdmin(o, c)
	createTopic(adm, o.Topic, int32(o.Partitions), nil)
	adm.Close()
	compat.Line("created", o.Topic)
	var messages []*sarama.ProducerMessage
	for _, kv := range compat.StdinRecords() {
		messages = append(messages, &sarama.ProducerMessage{Topic: o.Topic, Key: sarama.StringEncoder(kv[0]), Value: sarama.StringEncoder(kv[1])})
	}
	produce(o, c, messages)
	for _, m := range messages {
		compat.Line("produced", m.Partition, m.Offset, m.Key, m.Value)
	}

	c.Consumer.Group.Session.Timeout = o.SessionTimeout
	c.Consumer.Group.Heartbeat.Interval = o.SessionTimeout / 4
	c.Consumer.Offsets.AutoCommit.Enable = false
	group, err := sarama.NewConsumerGroup(o.Bootstrap, o.Group, c)
	if err != nil {
		compat.Fail("consume", err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), o.Deadline)
	defer cancel()
	h := &roundtripHandler{want: len(messages), cancel: cancel}
	errs := make(chan error, 1)
	go func() {
		var first error
		for err := range group.Errors() {
			if first == nil {
				first = err
			}
		}
		errs <- first
	}()
	for ctx.Err() == nil {
		if err := group.Consume(ctx, []string{o.Topic}, h); err != nil && !errors.Is(err, context.Canceled) {
			compat.Fail("consume", err)
		}
	}
	if err := group.Close(); err != nil {
		compat.Fail("consume", fmt.Errorf("close: %w", err))
	}
	if h.seen < h.want {
		compat.Fail("consume", fmt.Errorf("%d of %d records by the deadline", h.seen, h.want))
	}
	if err := <-errs; err != nil { // a failed commit is reported here
		compat.Fail("consume", err)
	}
}

type roundtripHandler struct {
	mu     sync.Mutex
	want   int
	seen   int
	cancel context.CancelFunc
}

func (h *roundtripHandler) Setup(sarama.ConsumerGroupSession) error { return nil }

func (h *roundtripHandler) Cleanup(s sarama.ConsumerGroupSession) error {
	s.Commit()
	return nil
}

func (h *roundtripHandler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		compat.Line("consumed", msg.Partition, msg.Offset, string(msg.Key), string(msg.Value))
		s.MarkMessage(msg, "")
		h.mu.Lock()
		h.seen++
		if h.seen >= h.want {
			h.cancel()
		}
		h.mu.Unlock()
	}
	return nil
}

var codecs = map[string]sarama.CompressionCodec{
	"gzip": sarama.CompressionGZIP, "snappy": sarama.CompressionSnappy,
	"lz4": sarama.CompressionLZ4, "zstd": sarama.CompressionZSTD,
}

func headersOf(hs []*sarama.RecordHeader) [][2]string {
	out := [][2]string{}
	for _, h := range hs {
		out = append(out, [2]string{string(h.Key), string(h.Value)})
	}
	return out
}

func bytesOf(e sarama.Encoder) []byte {
	if e == nil {
		return nil
	}
	b, _ := e.Encode()
	return b
}

// runCase produces every topic of the case with its codec and limits, then reads every
// partition from the oldest offset (partition consumers, no group) up to the newest offsets
// the client lists after producing.
func runCase(o compat.Options) {
	topics := compat.Topics(o.Case, o.Topic, o.RunID)
	c := config(o)
	adm := clusterAdmin(o, c)
	for _, t := range topics {
		createTopic(adm, t.Name, t.Partitions, t.Configs)
		compat.Note("created", t.Name, "")
	}
	adm.Close()
	for _, t := range topics {
		pc := config(o)
		if t.Compression != "" {
			pc.Producer.Compression = codecs[t.Compression]
		}
		if t.Explicit() {
			pc.Producer.Partitioner = sarama.NewManualPartitioner
		}
		if t.Large() {
			pc.Producer.MaxMessageBytes = compat.LargeLimitBytes
		}
		var messages []*sarama.ProducerMessage
		for _, r := range t.Records {
			m := &sarama.ProducerMessage{Topic: t.Name, Partition: r.Partition, Key: sarama.ByteEncoder(r.Key)}
			if r.Value != nil {
				m.Value = sarama.ByteEncoder(r.Value)
			}
			for _, h := range r.Headers {
				m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte(h.Key), Value: []byte(h.Value)})
			}
			messages = append(messages, m)
		}
		produce(o, pc, messages)
		for _, m := range messages {
			hs := [][2]string{}
			for _, h := range m.Headers {
				hs = append(hs, [2]string{string(h.Key), string(h.Value)})
			}
			compat.Produced(t.Name, m.Partition, m.Offset, bytesOf(m.Key), bytesOf(m.Value), hs)
		}
	}

	c.Consumer.Fetch.Default = compat.LargeLimitBytes
	client, err := sarama.NewClient(o.Bootstrap, c)
	if err != nil {
		compat.Fail("consume", err)
	}
	defer client.Close()
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		compat.Fail("consume", err)
	}
	ends := compat.NewEnds()
	messages := make(chan *sarama.ConsumerMessage)
	failures := make(chan error)
	for _, t := range topics {
		for p, end := range endOffsets(client, t.Name) {
			ends.Want(t.Name, p, end)
			if end == 0 {
				continue
			}
			// Each partition consumer is started in its own goroutine: started one after
			// another, each waits for its broker's fetch in flight before it is added
			// (200 partitions over three brokers took 90 s that way, directly).
			go func(topic string, p int32) {
				pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
				if err != nil {
					failures <- err
					return
				}
				go func() {
					for e := range pc.Errors() {
						failures <- e
					}
				}()
				for m := range pc.Messages() {
					messages <- m
				}
			}(t.Name, p)
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), o.Deadline)
	defer cancel()
	for !ends.Done() {
		select {
		case m := <-messages:
			compat.Consumed(m.Topic, m.Partition, m.Offset, m.Key, m.Value, headersOf(m.Headers))
			ends.Seen(m.Topic, m.Partition, m.Offset)
		case err := <-failures:
			compat.Fail("consume", err)
		case <-ctx.Done():
			compat.Fail("consume", fmt.Errorf("not every partition read to its end by the deadline"))
		}
	}
	os.Exit(0) // the partition consumers still hold fetched records; nothing more is needed
}

// endOffsets lists the newest offset of every partition of topic with one ListOffsets
// request per leader (client.GetOffset asks one partition at a time: 200 partitions took
// 40 s on three brokers).
func endOffsets(client sarama.Client, topic string) map[int32]int64 {
	partitions, err := client.Partitions(topic)
	if err != nil {
		compat.Fail("consume", err)
	}
	requests := map[*sarama.Broker]*sarama.OffsetRequest{}
	for _, p := range partitions {
		leader, err := client.Leader(topic, p)
		if err != nil {
			compat.Fail("consume", err)
		}
		if requests[leader] == nil {
			requests[leader] = &sarama.OffsetRequest{Version: 1}
		}
		requests[leader].AddBlock(topic, p, sarama.OffsetNewest, 1)
	}
	ends := map[int32]int64{}
	for broker, request := range requests {
		response, err := broker.GetAvailableOffsets(request)
		if err != nil {
			compat.Fail("consume", err)
		}
		for p, block := range response.Blocks[topic] {
			if block.Err != sarama.ErrNoError {
				compat.Fail("consume", fmt.Errorf("%s/%d: %w", topic, p, block.Err))
			}
			ends[p] = block.Offset
		}
	}
	return ends
}

// member is one group member for the join-and-leave check: ConsumeClaim processes (prints)
// and marks each record; Cleanup, which sarama runs after every claim has stopped and before
// the partitions move (eager range assignment), commits what was marked, synchronously.
func member(a compat.MemberArgs) {
	if a.Protocol != "classic" {
		compat.Fail("setup", fmt.Errorf("sarama speaks only the classic group protocol, not %q", a.Protocol))
	}
	stop := compat.WaitForStop()
	c := config(compat.Options{})
	c.ClientID = "compat-sarama-member"
	c.Consumer.Group.Session.Timeout = a.SessionTimeout
	c.Consumer.Group.Heartbeat.Interval = a.SessionTimeout / 4
	c.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRange()}
	c.Consumer.Offsets.AutoCommit.Enable = false
	group, err := sarama.NewConsumerGroup(a.Bootstrap, a.Group, c)
	if err != nil {
		compat.Fail("setup", err)
	}
	go func() {
		for err := range group.Errors() {
			compat.Line("error", err.Error())
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-stop
		cancel()
	}()
	h := &memberHandler{limiter: compat.NewLimiter(a.MaxRate), topic: a.Topic}
	for ctx.Err() == nil {
		if err := group.Consume(ctx, []string{a.Topic}, h); err != nil && !errors.Is(err, context.Canceled) {
			compat.Line("error", err.Error())
		}
	}
	if err := group.Close(); err != nil {
		compat.Line("error", "close: "+err.Error())
	}
	compat.Line("closed")
}

type memberHandler struct {
	limiter *compat.Limiter
	topic   string
	mu      sync.Mutex
	marked  map[int32]int64
}

func claimed(s sarama.ConsumerGroupSession, topic string) []int32 {
	return s.Claims()[topic]
}

func (h *memberHandler) Setup(s sarama.ConsumerGroupSession) error {
	h.mu.Lock()
	h.marked = map[int32]int64{}
	h.mu.Unlock()
	compat.Line("assigned", compat.JoinPartitions(claimed(s, h.topic)))
	return nil
}

func (h *memberHandler) Cleanup(s sarama.ConsumerGroupSession) error {
	s.Commit()
	h.mu.Lock()
	partitions := make([]int32, 0, len(h.marked))
	for p := range h.marked {
		partitions = append(partitions, p)
	}
	sort.Slice(partitions, func(i, j int) bool { return partitions[i] < partitions[j] })
	for _, p := range partitions {
		compat.Line("committed", p, h.marked[p])
	}
	h.mu.Unlock()
	compat.Line("revoked", compat.JoinPartitions(claimed(s, h.topic)))
	return nil
}

func (h *memberHandler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case msg, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			h.limiter.Wait()
			compat.Line("consumed", msg.Partition, msg.Offset, string(msg.Value))
			s.MarkMessage(msg, "")
			h.mu.Lock()
			h.marked[msg.Partition] = msg.Offset + 1
			h.mu.Unlock()
		case <-s.Context().Done():
			return nil
		}
	}
}

// admin: the admin round with ClusterAdmin, one step at a time.
func admin(o compat.Options) {
	adm := clusterAdmin(o, config(o))
	defer adm.Close()
	createTopic(adm, o.Topic, 1, nil)
	compat.Step("created", o.Topic, "")
	compat.Step("config", o.Topic, "retention.ms="+topicConfig(adm, o.Topic, "retention.ms"))
	value := "3600000"
	entries := map[string]sarama.IncrementalAlterConfigsEntry{
		"retention.ms": {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &value},
	}
	if err := adm.IncrementalAlterConfig(sarama.TopicResource, o.Topic, entries, false); err != nil {
		compat.Fail("admin", fmt.Errorf("alter configs: %w", err))
	}
	compat.Step("altered", o.Topic, "")
	compat.Step("described", o.Topic, "retention.ms="+topicConfig(adm, o.Topic, "retention.ms"))
	resource := sarama.Resource{ResourceType: sarama.AclResourceTopic, ResourceName: o.Topic, ResourcePatternType: sarama.AclPatternLiteral}
	acl := sarama.Acl{Principal: o.Principal, Host: "*", Operation: sarama.AclOperationRead, PermissionType: sarama.AclPermissionAllow}
	if err := adm.CreateACL(resource, acl); err != nil {
		compat.Fail("admin", fmt.Errorf("create ACL: %w", err))
	}
	compat.Step("acl-created", o.Topic, o.Principal)
	name := o.Topic
	filter := sarama.AclFilter{
		ResourceType: sarama.AclResourceTopic, ResourceName: &name, ResourcePatternTypeFilter: sarama.AclPatternLiteral,
		Operation: sarama.AclOperationAny, PermissionType: sarama.AclPermissionAny,
	}
	listed, err := adm.ListAcls(filter)
	if err != nil {
		compat.Fail("admin", fmt.Errorf("describe ACLs: %w", err))
	}
	var found []string
	for _, r := range listed {
		for _, a := range r.Acls {
			found = append(found, fmt.Sprintf("%s %s %s %s", a.Principal, a.Host, strings.ToUpper(a.Operation.String()), r.ResourceName))
		}
	}
	sort.Strings(found)
	compat.Step("acls", o.Topic, strings.Join(found, "; "))
	deleted, err := adm.DeleteACL(filter, false)
	if err != nil {
		compat.Fail("admin", fmt.Errorf("delete ACLs: %w", err))
	}
	compat.Step("acl-deleted", o.Topic, strconv.Itoa(len(deleted)))
	if err := adm.DeleteTopic(o.Topic); err != nil {
		compat.Fail("admin", fmt.Errorf("delete topic: %w", err))
	}
	compat.Step("deleted", o.Topic, "")
}

func topicConfig(adm sarama.ClusterAdmin, topic, name string) string {
	entries, err := adm.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic, ConfigNames: []string{name}})
	if err != nil {
		compat.Fail("admin", fmt.Errorf("describe configs: %w", err))
	}
	for _, e := range entries {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}
