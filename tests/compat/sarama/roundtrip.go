// The compat round trip with Go's sarama (Debian's golang-github-shopify-sarama-dev 1.22.1),
// built offline in GOPATH mode against /usr/share/gocode (tests/compat/_sarama.py).
//
// Usage: roundtrip BOOTSTRAP TOPIC PARTITIONS MODE GROUP SESSION_TIMEOUT_MS DEADLINE_MS [CA [CERT KEY]]
// Records come on stdin as "key<TAB>value" lines. Output, one line each (tests/compat/_sarama.parse_events):
// "created TOPIC", "produced P O K V", "consumed P O K V" (tab-separated).
// Exit 0 when every record was consumed (and, in the group modes, committed), 2 at the deadline.
// $SARAMA_VERSION overrides the Kafka version sarama speaks (default 2.0.0).
// $SARAMA_SASL_MECHANISM (SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN), $SARAMA_SASL_USER and
// $SARAMA_SASL_PASSWORD turn SASL on. sarama 1.22 only defines the SCRAM client interface; the
// client below (RFC 5802, standard library only: Debian has no xdg/scram) implements it. With
// SCRAM, sarama sends SaslHandshake v1 and framed SaslAuthenticate requests.
//
// MODE is how the records are read back:
//
//	partitions  a partition consumer per partition from the oldest offset, no group, nothing
//	            committed (GROUP unused): the mode the matrix runs against Tansu;
//	group       join GROUP (JoinGroup/SyncGroup), consume what is assigned, commit;
//	standalone  partition consumers plus an OffsetCommit without joining (OffsetManager).
//
// Against Tansu 0.6 neither group mode completes, directly or through the proxy (measured):
// JoinGroup (v2 at 2.0.0, any version from 0.11.0 up) is answered MEMBER_ID_REQUIRED (79),
// which KIP-394 allows only from JoinGroup v4 and which sarama 1.22 does not handle; and the
// standalone OffsetCommit (generation -1) is answered UNKNOWN_MEMBER_ID forever, so the
// OffsetManager never finishes. At 0.10.2.0 the produce itself fails.
package main

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"hash"
	"io/ioutil"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Shopify/sarama"
)

func fail(stage string, err error) {
	fmt.Fprintf(os.Stderr, "%s failed: %v\n", stage, err)
	os.Exit(1)
}

func tlsConfig(args []string) *tls.Config {
	if len(args) == 0 {
		return nil
	}
	pem, err := ioutil.ReadFile(args[0])
	if err != nil {
		fail("setup", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	config := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
	if len(args) >= 3 {
		pair, err := tls.LoadX509KeyPair(args[1], args[2])
		if err != nil {
			fail("setup", err)
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return config
}

// scramClient is sarama.SCRAMClient for SCRAM-SHA-256/512 (RFC 5802, no channel binding).
type scramClient struct {
	newHash         func() hash.Hash
	user, password  string
	nonce           string
	clientFirstBare string
	serverSignature []byte
	step            int
	done            bool
}

func (c *scramClient) Begin(user, password, authzID string) error {
	c.user, c.password = user, password
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return err
	}
	c.nonce = base64.RawStdEncoding.EncodeToString(raw)
	return nil
}

func (c *scramClient) hmac(key []byte, data string) []byte {
	mac := hmac.New(c.newHash, key)
	mac.Write([]byte(data))
	return mac.Sum(nil)
}

// pbkdf2 derives one hash-length block (all SCRAM needs) from the password and salt.
func (c *scramClient) pbkdf2(salt []byte, iterations int) []byte {
	mac := hmac.New(c.newHash, []byte(c.password))
	mac.Write(salt)
	mac.Write([]byte{0, 0, 0, 1})
	u := mac.Sum(nil)
	out := append([]byte(nil), u...)
	for i := 1; i < iterations; i++ {
		mac = hmac.New(c.newHash, []byte(c.password))
		mac.Write(u)
		u = mac.Sum(nil)
		for j := range out {
			out[j] ^= u[j]
		}
	}
	return out
}

func (c *scramClient) Step(challenge string) (string, error) {
	c.step++
	switch c.step {
	case 1:
		name := strings.NewReplacer("=", "=3D", ",", "=2C").Replace(c.user)
		c.clientFirstBare = "n=" + name + ",r=" + c.nonce
		return "n,," + c.clientFirstBare, nil
	case 2:
		fields := map[string]string{}
		for _, part := range strings.Split(challenge, ",") {
			if len(part) > 2 && part[1] == '=' {
				fields[part[:1]] = part[2:]
			}
		}
		if !strings.HasPrefix(fields["r"], c.nonce) {
			return "", fmt.Errorf("server nonce does not extend ours")
		}
		salt, err := base64.StdEncoding.DecodeString(fields["s"])
		if err != nil {
			return "", err
		}
		iterations, err := strconv.Atoi(fields["i"])
		if err != nil {
			return "", err
		}
		salted := c.pbkdf2(salt, iterations)
		clientKey := c.hmac(salted, "Client Key")
		h := c.newHash()
		h.Write(clientKey)
		storedKey := h.Sum(nil)
		withoutProof := "c=biws,r=" + fields["r"]
		authMessage := c.clientFirstBare + "," + challenge + "," + withoutProof
		signature := c.hmac(storedKey, authMessage)
		proof := make([]byte, len(clientKey))
		for i := range proof {
			proof[i] = clientKey[i] ^ signature[i]
		}
		c.serverSignature = c.hmac(c.hmac(salted, "Server Key"), authMessage)
		return withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof), nil
	default:
		if !strings.HasPrefix(challenge, "v=") {
			return "", fmt.Errorf("server final message: %q", challenge)
		}
		verifier, err := base64.StdEncoding.DecodeString(challenge[2:])
		if err != nil || !hmac.Equal(verifier, c.serverSignature) {
			return "", fmt.Errorf("server signature does not verify")
		}
		c.done = true
		return "", nil
	}
}

func (c *scramClient) Done() bool { return c.done }

func saslFromEnvironment(config *sarama.Config) {
	mechanism := os.Getenv("SARAMA_SASL_MECHANISM")
	if mechanism == "" {
		return
	}
	config.Net.SASL.Enable = true
	config.Net.SASL.Handshake = true
	config.Net.SASL.Mechanism = sarama.SASLMechanism(mechanism)
	config.Net.SASL.User = os.Getenv("SARAMA_SASL_USER")
	config.Net.SASL.Password = os.Getenv("SARAMA_SASL_PASSWORD")
	newHash := sha512.New
	if mechanism == sarama.SASLTypeSCRAMSHA256 {
		newHash = sha256.New
	}
	config.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient {
		return &scramClient{newHash: newHash}
	}
}

type handler struct {
	want     int
	mu       sync.Mutex
	seen     int
	done     chan struct{}
	doneOnce sync.Once
}

func (h *handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *handler) ConsumeClaim(session sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		fmt.Printf("consumed\t%d\t%d\t%s\t%s\n", msg.Partition, msg.Offset, msg.Key, msg.Value)
		session.MarkMessage(msg, "")
		h.mu.Lock()
		h.seen++
		if h.seen >= h.want {
			h.doneOnce.Do(func() { close(h.done) })
		}
		h.mu.Unlock()
	}
	return nil
}

func main() {
	bootstrap, topic, mode, group := os.Args[1], os.Args[2], os.Args[4], os.Args[5]
	partitions, _ := strconv.Atoi(os.Args[3])
	sessionMs, _ := strconv.Atoi(os.Args[6])
	deadlineMs, _ := strconv.Atoi(os.Args[7])
	deadline := time.Now().Add(time.Duration(deadlineMs) * time.Millisecond)

	config := sarama.NewConfig()
	config.Version = sarama.V2_0_0_0
	if v := os.Getenv("SARAMA_VERSION"); v != "" {
		parsed, err := sarama.ParseKafkaVersion(v)
		if err != nil {
			fail("setup", err)
		}
		config.Version = parsed
	}
	config.ClientID = "compat-sarama"
	if t := tlsConfig(os.Args[8:]); t != nil {
		config.Net.TLS.Enable = true
		config.Net.TLS.Config = t
	}
	saslFromEnvironment(config)
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Return.Successes = true
	config.Producer.Partitioner = sarama.NewHashPartitioner
	config.Consumer.Offsets.Initial = sarama.OffsetOldest
	config.Consumer.Group.Session.Timeout = time.Duration(sessionMs) * time.Millisecond
	config.Consumer.Group.Heartbeat.Interval = time.Duration(sessionMs/4) * time.Millisecond
	config.Consumer.Offsets.CommitInterval = 200 * time.Millisecond
	brokers := []string{bootstrap}

	admin, err := sarama.NewClusterAdmin(brokers, config)
	if err != nil {
		fail("create", err)
	}
	detail := &sarama.TopicDetail{NumPartitions: int32(partitions), ReplicationFactor: 1}
	if err := admin.CreateTopic(topic, detail, false); err != nil {
		fail("create", err)
	}
	admin.Close()
	fmt.Printf("created\t%s\n", topic)

	var messages []*sarama.ProducerMessage
	scanner := bufio.NewScanner(os.Stdin)
	for scanner.Scan() {
		parts := strings.SplitN(scanner.Text(), "\t", 2)
		messages = append(messages, &sarama.ProducerMessage{
			Topic: topic, Key: sarama.StringEncoder(parts[0]), Value: sarama.StringEncoder(parts[1]),
		})
	}
	producer, err := sarama.NewSyncProducer(brokers, config)
	if err != nil {
		fail("produce", err)
	}
	if err := producer.SendMessages(messages); err != nil {
		fail("produce", err)
	}
	for _, m := range messages {
		fmt.Printf("produced\t%d\t%d\t%s\t%s\n", m.Partition, m.Offset, m.Key, m.Value)
	}
	producer.Close()

	var complete bool
	switch mode {
	case "partitions":
		complete = consumePartitions(brokers, topic, config, messages, deadline)
	case "standalone":
		complete = consumeAndCommit(brokers, topic, group, config, len(messages), deadline)
	case "group":
		complete = consumeInGroup(brokers, topic, group, config, len(messages), deadline)
	default:
		fail("setup", fmt.Errorf("unknown mode %q (partitions, group, standalone)", mode))
	}
	if !complete {
		os.Exit(2)
	}
}

// consumePartitions reads every partition of the topic from the oldest offset with one
// partition consumer each (sarama.NewConsumer + ConsumePartition), no group and no commit,
// until each partition has returned the highest offset the producer was told for it. It
// never asks ListOffsets for the end (Tansu answers "latest" wrongly); records past that
// offset are not awaited, but the checker's direct read of the topic sees them.
func consumePartitions(brokers []string, topic string, config *sarama.Config, produced []*sarama.ProducerMessage, deadline time.Time) bool {
	last := map[int32]int64{}
	for _, m := range produced {
		if offset, ok := last[m.Partition]; !ok || m.Offset > offset {
			last[m.Partition] = m.Offset
		}
	}
	consumer, err := sarama.NewConsumer(brokers, config)
	if err != nil {
		fail("consume", err)
	}
	partitions, err := consumer.Partitions(topic)
	if err != nil {
		fail("consume", err)
	}
	messages := make(chan *sarama.ConsumerMessage)
	errors := make(chan error)
	var pcs []sarama.PartitionConsumer
	for _, partition := range partitions {
		pc, err := consumer.ConsumePartition(topic, partition, sarama.OffsetOldest)
		if err != nil {
			fail("consume", err)
		}
		pcs = append(pcs, pc)
		go func(pc sarama.PartitionConsumer) {
			for msg := range pc.Messages() {
				messages <- msg
			}
		}(pc)
		go func(pc sarama.PartitionConsumer) {
			for err := range pc.Errors() {
				errors <- err
			}
		}(pc)
	}
	// Partitions still owed a record: every partition the producer wrote to.
	owed := len(last)
	reached := map[int32]bool{}
	timeout := time.After(time.Until(deadline))
	complete := true
	for owed > 0 && complete {
		select {
		case msg := <-messages:
			fmt.Printf("consumed\t%d\t%d\t%s\t%s\n", msg.Partition, msg.Offset, msg.Key, msg.Value)
			if end, ok := last[msg.Partition]; ok && msg.Offset >= end && !reached[msg.Partition] {
				reached[msg.Partition] = true
				owed--
			}
		case err := <-errors:
			fail("consume", err)
		case <-timeout:
			complete = false
		}
	}
	// Close drains what the consumers still hold; keep reading (and dropping) meanwhile.
	go func() {
		for range messages {
		}
	}()
	go func() {
		for range errors {
		}
	}()
	for _, pc := range pcs {
		pc.AsyncClose()
	}
	if err := consumer.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "close: %v\n", err)
	}
	return complete
}

// consumeInGroup joins the group (JoinGroup/SyncGroup) and consumes what it is assigned.
// Tansu answers sarama 1.22's JoinGroup v2 with MEMBER_ID_REQUIRED (79), which KIP-394 only
// allows from v4 and which sarama 1.22 does not know, so this mode fails against Tansu.
func consumeInGroup(brokers []string, topic, group string, config *sarama.Config, want int, deadline time.Time) bool {
	consumer, err := sarama.NewConsumerGroup(brokers, group, config)
	if err != nil {
		fail("consume", err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	h := &handler{want: want, done: make(chan struct{})}
	go func() {
		for ctx.Err() == nil {
			if err := consumer.Consume(ctx, []string{topic}, h); err != nil {
				fmt.Fprintf(os.Stderr, "consume: %v\n", err)
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	complete := false
	select {
	case <-h.done:
		complete = true
		// Marked offsets are committed every CommitInterval; wait for one more, then close
		// (Close commits what is left).
		time.Sleep(3 * config.Consumer.Offsets.CommitInterval)
	case <-ctx.Done():
	}
	cancel()
	if err := consumer.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "close: %v\n", err)
	}
	return complete
}

// consumeAndCommit reads every partition from the oldest offset with partition consumers and
// commits the group's offsets with sarama's OffsetManager (OffsetCommit without a group
// generation, as Kafka's "standalone" consumers do): no JoinGroup.
func consumeAndCommit(brokers []string, topic, group string, config *sarama.Config, want int, deadline time.Time) bool {
	client, err := sarama.NewClient(brokers, config)
	if err != nil {
		fail("consume", err)
	}
	defer client.Close()
	partitions, err := client.Partitions(topic)
	if err != nil {
		fail("consume", err)
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		fail("consume", err)
	}
	offsets, err := sarama.NewOffsetManagerFromClient(group, client)
	if err != nil {
		fail("consume", err)
	}
	seen := 0
	for _, partition := range partitions {
		pom, err := offsets.ManagePartition(topic, partition)
		if err != nil {
			fail("consume", err)
		}
		newest, err := client.GetOffset(topic, partition, sarama.OffsetNewest)
		if err != nil {
			fail("consume", err)
		}
		pc, err := consumer.ConsumePartition(topic, partition, sarama.OffsetOldest)
		if err != nil {
			fail("consume", err)
		}
		next := int64(-1)
		for next+1 < newest {
			select {
			case msg := <-pc.Messages():
				fmt.Printf("consumed\t%d\t%d\t%s\t%s\n", msg.Partition, msg.Offset, msg.Key, msg.Value)
				pom.MarkOffset(msg.Offset+1, "")
				next = msg.Offset
				seen++
			case err := <-pc.Errors():
				fail("consume", err)
			case <-time.After(time.Until(deadline)):
				return false
			}
		}
		pc.Close()
		pom.Close()
	}
	if err := offsets.Close(); err != nil {
		fail("commit", err)
	}
	consumer.Close()
	return seen >= want
}
