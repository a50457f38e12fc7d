// Package compat is what the three Go client programs (franz, sarama, kafkago) share: the
// command line every mode takes, the lines they print, the records of each case and the
// TLS and SASL settings. Each program only speaks its own client library; what the test
// driver (tests/compat/_go.py) sends and reads is defined once, here.
//
// Modes, the first argument:
//
//	roundtrip  create the topic, produce the records read from stdin ("key<TAB>value" lines)
//	           with acks=all (idempotent where the client can), consume them back in a group
//	           and commit. Prints TSV lines: "created T", "produced P O K V", "consumed P O K V".
//	case       one feature case (-case codecs|large|partitions|headers) on topics named from
//	           -topic; records come from Records below, not stdin. Prints JSON lines (Event).
//	member     one member of a consumer group for the join-and-leave check
//	           (tests/compat/_group_consume.py): positional bootstrap topic group session_ms
//	           max_rate protocol; "stop" on stdin commits, leaves and exits. TSV lines:
//	           "assigned p,p", "revoked p,p", "consumed P O V", "committed P O", "closed".
//	admin      the admin round (-topic, -principal): create a topic, describe and alter its
//	           configs, create, describe and delete an ACL, delete the topic. JSON lines.
//
// SASL comes from the environment (COMPAT_SASL_MECHANISM, COMPAT_SASL_USER,
// COMPAT_SASL_PASSWORD), so the password is never on a command line.
package compat

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// Options is the command line of the roundtrip, case and admin modes.
type Options struct {
	Bootstrap      []string
	Topic          string
	Partitions     int
	Group          string
	Case           string
	RunID          string
	Principal      string
	SessionTimeout time.Duration
	Deadline       time.Time
	TLS            *tls.Config
	SASL           *SASL
	ReadCommitted  bool
	Idempotent     bool
	GroupProtocol  string
	SoftwareName   string
}

// SASL is the login from the environment.
type SASL struct {
	Mechanism, User, Password string
}

// Parse reads the flags after the mode.
func Parse(args []string) Options {
	fs := flag.NewFlagSet("compat", flag.ExitOnError)
	bootstrap := fs.String("bootstrap", "127.0.0.1:9092", "HOST:PORT[,HOST:PORT]")
	topic := fs.String("topic", "", "topic (the base name in the case mode)")
	partitions := fs.Int("partitions", 3, "partitions of the new topic")
	group := fs.String("group", "", "consumer group")
	kase := fs.String("case", "", "codecs, large, partitions or headers")
	runID := fs.String("run-id", "compat", "prefix of every value")
	principal := fs.String("principal", "User:alice", "the ACL's principal (admin mode)")
	sessionMs := fs.Int("session-timeout-ms", 6000, "group session timeout")
	deadlineMs := fs.Int("deadline-ms", 90000, "give up after this")
	ca := fs.String("ca", "", "PEM CA: TLS to the bootstrap")
	cert := fs.String("cert", "", "PEM client certificate (mutual TLS)")
	key := fs.String("key", "", "PEM client key (mutual TLS)")
	if err := fs.Parse(args); err != nil {
		Fail("setup", err)
	}
	o := Options{
		Bootstrap:      strings.Split(*bootstrap, ","),
		Topic:          *topic,
		Partitions:     *partitions,
		Group:          *group,
		Case:           *kase,
		RunID:          *runID,
		Principal:      *principal,
		SessionTimeout: time.Duration(*sessionMs) * time.Millisecond,
		Deadline:       time.Now().Add(time.Duration(*deadlineMs) * time.Millisecond),
	}
	if *ca != "" {
		o.TLS = tlsConfig(*ca, *cert, *key)
	}
	if m := os.Getenv("COMPAT_SASL_MECHANISM"); m != "" {
		o.SASL = &SASL{m, os.Getenv("COMPAT_SASL_USER"), os.Getenv("COMPAT_SASL_PASSWORD")}
	}
	return o
}

func tlsConfig(ca, cert, key string) *tls.Config {
	pem, err := os.ReadFile(ca)
	if err != nil {
		Fail("setup", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		Fail("setup", fmt.Errorf("no certificate in %s", ca))
	}
	// The test certificates name 127.0.0.1, which is what the clients dial.
	config := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			Fail("setup", err)
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return config
}

// Fail reports the stage that failed on stderr and exits 1.
func Fail(stage string, err error) {
	fmt.Fprintf(os.Stderr, "%s failed: %v\n", stage, err)
	os.Exit(1)
}

var out sync.Mutex

// Line prints one tab-separated line and flushes it (stdout is a pipe to the driver).
func Line(fields ...any) {
	parts := make([]string, len(fields))
	for i, f := range fields {
		parts[i] = fmt.Sprint(f)
	}
	out.Lock()
	defer out.Unlock()
	fmt.Fprintln(os.Stdout, strings.Join(parts, "\t"))
}

// Event is one JSON line of the case and admin modes. Values are shown as Digest(value), so
// a 5 MiB record is one short line; a null key or value is JSON null.
type Event struct {
	Event     string      `json:"event"`
	Topic     string      `json:"topic,omitempty"`
	Partition int32       `json:"partition"`
	Offset    int64       `json:"offset"`
	Key       *string     `json:"key"`
	Value     *string     `json:"value"`
	Headers   [][2]string `json:"headers"`
	Detail    string      `json:"detail,omitempty"`
}

// Emit prints one Event.
func Emit(e Event) {
	if e.Headers == nil {
		e.Headers = [][2]string{}
	}
	line, err := json.Marshal(e)
	if err != nil {
		Fail("setup", err)
	}
	out.Lock()
	defer out.Unlock()
	fmt.Fprintln(os.Stdout, string(line))
}

// Note prints a JSON line with just an event name and a detail (admin steps, "created").
func Note(event, topic, detail string) {
	Emit(Event{Event: event, Topic: topic, Partition: -1, Offset: -1, Detail: detail})
}

// Digest is how a value is shown: "<length>:<first 16 hex digits of its SHA-256>".
func Digest(value []byte) *string {
	if value == nil {
		return nil
	}
	sum := sha256.Sum256(value)
	d := fmt.Sprintf("%d:%s", len(value), hex.EncodeToString(sum[:])[:16])
	return &d
}

// Text is a key as shown: nil stays null.
func Text(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

// Modes is a program's modes: the roundtrip, case and admin ones take Options, member takes
// MemberArgs; a mode the client does not have is left nil.
type Modes struct {
	Roundtrip, Case, Admin func(Options)
	Member                 func(MemberArgs)
}

// Main runs the mode named by the first argument, or fails with the modes there are.
func Main(client string, modes Modes) {
	mode := ""
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	switch {
	case mode == "roundtrip" && modes.Roundtrip != nil:
		modes.Roundtrip(Parse(os.Args[2:]))
	case mode == "case" && modes.Case != nil:
		modes.Case(Parse(os.Args[2:]))
	case mode == "admin" && modes.Admin != nil:
		modes.Admin(Parse(os.Args[2:]))
	case mode == "member" && modes.Member != nil:
		modes.Member(ParseMember(os.Args[2:]))
	default:
		Fail("setup", fmt.Errorf("%s has no mode %q", client, mode))
	}
}
