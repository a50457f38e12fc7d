package compat

import (
	"fmt"
	"strconv"
	"strings"
)

// The feature cases, record for record as tests/compat/_cases.py defines them (the driver
// compares what the broker holds with its own copy of these lists, so the two must agree).

// Header is one record header; values are never null in these cases.
type Header struct{ Key, Value string }

// Record is one record to produce. Partition -1 leaves the choice to the client's
// partitioner (by key); a nil Value is a tombstone.
type Record struct {
	Partition int32
	Key       []byte
	Value     []byte
	Headers   []Header
}

// Topic is one topic of a case: how to create it, which codec its producer uses, and its
// records in production order.
type Topic struct {
	Name        string
	Partitions  int32
	Configs     map[string]string
	Compression string // "", gzip, snappy, lz4, zstd
	Records     []Record
}

// Codecs are the four compression codecs Kafka knows.
var Codecs = []string{"gzip", "snappy", "lz4", "zstd"}

// LargeValueBytes is the size of one record of the large case: 5 MiB.
const LargeValueBytes = 5 << 20

// LargeLimitBytes is what the large case sets for the topic's max.message.bytes and the
// clients' request and fetch limits: room for one 5 MiB record and its batch.
const LargeLimitBytes = 8 << 20

// Topics is the case's topics for base name “base“ and run id “run“.
func Topics(kase, base, run string) []Topic {
	switch kase {
	case "codecs":
		var topics []Topic
		for _, codec := range Codecs {
			var records []Record
			for i := 0; i < 200; i++ {
				value := strings.Repeat(fmt.Sprintf("%s %s %d ", run, codec, i), 20)
				records = append(records, Record{-1, []byte(fmt.Sprintf("key-%d", i%10)), []byte(value), nil})
			}
			topics = append(topics, Topic{base + "-" + codec, 3, nil, codec, records})
		}
		return topics
	case "large":
		var records []Record
		for i := 0; i < 3; i++ {
			unit := fmt.Sprintf("%s large %d ", run, i)
			value := strings.Repeat(unit, LargeValueBytes/len(unit)+1)[:LargeValueBytes]
			records = append(records, Record{-1, []byte(fmt.Sprintf("key-%d", i)), []byte(value), nil})
		}
		configs := map[string]string{"max.message.bytes": strconv.Itoa(LargeLimitBytes)}
		return []Topic{{base + "-large", 1, configs, "", records}}
	case "partitions":
		var records []Record
		for i := 0; i < 400; i++ {
			records = append(records, Record{int32(i % 200), []byte(fmt.Sprintf("key-%d", i)), []byte(fmt.Sprintf("%s p %d", run, i)), nil})
		}
		return []Topic{{base + "-p200", 200, nil, "", records}}
	case "headers":
		var records []Record
		for i := 0; i < 50; i++ {
			var value []byte
			if i%5 != 4 {
				value = []byte(fmt.Sprintf("%s h %d", run, i))
			}
			headers := []Header{{"index", strconv.Itoa(i)}, {"run", run}, {"dup", "1"}, {"dup", "2"}, {"empty", ""}}
			records = append(records, Record{-1, []byte(fmt.Sprintf("key-%d", i%5)), value, headers})
		}
		return []Topic{{base + "-headers", 2, nil, "", records}}
	}
	Fail("setup", fmt.Errorf("unknown case %q (codecs, large, partitions, headers)", kase))
	return nil
}

// Explicit says whether the topic's records name their partitions.
func (t Topic) Explicit() bool {
	return len(t.Records) > 0 && t.Records[0].Partition >= 0
}

// Large says whether the topic needs the raised size limits.
func (t Topic) Large() bool {
	_, ok := t.Configs["max.message.bytes"]
	return ok
}

// Produced prints a "produced" event for a record the client acknowledged at (p, o).
func Produced(topic string, p int32, o int64, key, value []byte, headers [][2]string) {
	Emit(Event{Event: "produced", Topic: topic, Partition: p, Offset: o, Key: Text(key), Value: Digest(value), Headers: headers})
}

// Consumed prints a "consumed" event.
func Consumed(topic string, p int32, o int64, key, value []byte, headers [][2]string) {
	Emit(Event{Event: "consumed", Topic: topic, Partition: p, Offset: o, Key: Text(key), Value: Digest(value), Headers: headers})
}

// Ends tracks, per partition, the offset a consumer must reach (the end offset listed after
// producing) and whether it has.
type Ends struct {
	want    map[string]map[int32]int64
	pending int
}

// NewEnds starts tracking; partitions whose end is 0 are done from the start.
func NewEnds() *Ends { return &Ends{want: map[string]map[int32]int64{}} }

// Want records that topic/partition must be read up to end (exclusive).
func (e *Ends) Want(topic string, partition int32, end int64) {
	if e.want[topic] == nil {
		e.want[topic] = map[int32]int64{}
	}
	e.want[topic][partition] = end
	if end > 0 {
		e.pending++
	}
}

// Seen notes a consumed record; it returns true when every partition is read to its end.
func (e *Ends) Seen(topic string, partition int32, offset int64) bool {
	if end, ok := e.want[topic][partition]; ok && end > 0 && offset+1 >= end {
		e.want[topic][partition] = 0
		e.pending--
	}
	return e.pending == 0
}

// Done says whether nothing is left to read.
func (e *Ends) Done() bool { return e.pending == 0 }
