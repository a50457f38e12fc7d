// Strategy: the Java client's side of the matrix's cases beyond the round trip, one mode per
// case, each printing JSON lines (the same "created"/"produced"/"consumed" events as the Go
// and Python programs; tests/compat/_cases.py, _transactions.py, _share.py and _admin.py read
// them):
//
//   case   BOOTSTRAP CASE BASE RUN   a feature case (codecs, large, partitions, headers) with
//          the records tests/compat/_cases.py defines; idempotent acks=all producers, then a
//          group-less consumer reads every partition from the beginning to its end offset.
//   txn    BOOTSTRAP TOPIC           a transactional producer commits one transaction, aborts
//          one (flushed to the log first) and commits a third; a read_committed consumer
//          reads the topic to its end. Produced events carry "detail": commit or abort.
//   share  BOOTSTRAP TOPIC GROUP N   N records produced, then one KafkaShareConsumer (KIP-932)
//          in share group GROUP (share.auto.offset.reset=earliest, set with Admin first)
//          acknowledges them as it polls until it has N, and commits the acknowledgements.
//   admin  BOOTSTRAP TOPIC PRINCIPAL the admin round, a step at a time: each step is printed
//          and the program waits for "next" on stdin, so the driver can check it directly.
//
// Values are shown by digest (length and SHA-256 prefix), keys and headers as text.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class Cases {
    static final int LARGE_VALUE_BYTES = 5 << 20;
    static final int LARGE_LIMIT_BYTES = 8 << 20;
    static final List<String> CODECS = List.of("gzip", "snappy", "lz4", "zstd");
    static final long DEADLINE_MS = 100_000;

    private Cases() {}

    /** One record of a case: partition -1 = by key; value null = a tombstone. */
    record Rec(int partition, byte[] key, byte[] value, List<Header> headers) {}

    /** One topic of a case (tests/compat/_cases.py's CaseTopic). */
    record CaseTopic(String name, int partitions, Map<String, String> configs, String compression,
                     List<Rec> records) {}

    public static void main(String[] args) throws Exception {
        switch (args.length > 0 ? args[0] : "") {
            case "case" -> runCase(args[1], args[2], args[3], args[4]);
            case "txn" -> transactions(args[1], args[2]);
            case "share" -> share(args[1], args[2], args[3], Integer.parseInt(args[4]));
            case "admin" -> admin(args[1], args[2], args[3]);
            default -> {
                System.err.println("usage: Cases case|txn|share|admin ... (see the header)");
                System.exit(2);
            }
        }
        System.out.flush();
        System.exit(0);
    }

    // ---- the records of each case (the same as tests/compat/_cases.py) ----

    static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static List<CaseTopic> topics(String kase, String base, String run) {
        List<CaseTopic> topics = new ArrayList<>();
        switch (kase) {
            case "codecs" -> {
                for (String codec : CODECS) {
                    List<Rec> records = new ArrayList<>();
                    for (int i = 0; i < 200; i++) {
                        String value = (run + " " + codec + " " + i + " ").repeat(20);
                        records.add(new Rec(-1, utf8("key-" + (i % 10)), utf8(value), List.of()));
                    }
                    topics.add(new CaseTopic(base + "-" + codec, 3, Map.of(), codec, records));
                }
            }
            case "large" -> {
                List<Rec> records = new ArrayList<>();
                for (int i = 0; i < 3; i++) {
                    String unit = run + " large " + i + " ";
                    byte[] value = new byte[LARGE_VALUE_BYTES];
                    byte[] u = utf8(unit);
                    for (int j = 0; j < value.length; j++) {
                        value[j] = u[j % u.length];
                    }
                    records.add(new Rec(-1, utf8("key-" + i), value, List.of()));
                }
                topics.add(new CaseTopic(base + "-large", 1,
                    Map.of("max.message.bytes", Integer.toString(LARGE_LIMIT_BYTES)), "", records));
            }
            case "partitions" -> {
                List<Rec> records = new ArrayList<>();
                for (int i = 0; i < 400; i++) {
                    records.add(new Rec(i % 200, utf8("key-" + i), utf8(run + " p " + i), List.of()));
                }
                topics.add(new CaseTopic(base + "-p200", 200, Map.of(), "", records));
            }
            case "headers" -> {
                List<Rec> records = new ArrayList<>();
                for (int i = 0; i < 50; i++) {
                    byte[] value = i % 5 == 4 ? null : utf8(run + " h " + i);
                    List<Header> headers = List.of(
                        new RecordHeader("index", utf8(Integer.toString(i))),
                        new RecordHeader("run", utf8(run)),
                        new RecordHeader("dup", utf8("1")),
                        new RecordHeader("dup", utf8("2")),
                        new RecordHeader("empty", utf8("")));
                    records.add(new Rec(-1, utf8("key-" + (i % 5)), value, headers));
                }
                topics.add(new CaseTopic(base + "-headers", 2, Map.of(), "", records));
            }
            default -> throw new IllegalArgumentException("unknown case " + kase);
        }
        return topics;
    }

    // ---- output ----

    static String quote(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                default -> {
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        return b.append('"').toString();
    }

    static String digest(byte[] value) throws Exception {
        if (value == null) {
            return null;
        }
        byte[] sum = MessageDigest.getInstance("SHA-256").digest(value);
        return value.length + ":" + HexFormat.of().formatHex(sum).substring(0, 16);
    }

    static String text(byte[] b) {
        return b == null ? null : new String(b, StandardCharsets.UTF_8);
    }

    static void emit(String event, String topic, int partition, long offset, byte[] key,
                     byte[] value, Iterable<Header> headers, String detail) throws Exception {
        StringBuilder hs = new StringBuilder("[");
        if (headers != null) {
            for (Header h : headers) {
                if (hs.length() > 1) {
                    hs.append(',');
                }
                hs.append('[').append(quote(h.key())).append(',').append(quote(text(h.value()))).append(']');
            }
        }
        hs.append(']');
        String line = "{\"event\":" + quote(event) + ",\"topic\":" + quote(topic)
            + ",\"partition\":" + partition + ",\"offset\":" + offset
            + ",\"key\":" + quote(text(key)) + ",\"value\":" + quote(digest(value))
            + ",\"headers\":" + hs + (detail == null ? "" : ",\"detail\":" + quote(detail)) + "}";
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
    }

    static void note(String event, String topic, String detail) throws Exception {
        emit(event, topic, -1, -1, null, null, null, detail);
    }

    // ---- clients ----

    /** Bootstrap and client id; SASL (over plaintext) from $COMPAT_SASL_MECHANISM, _USER and
     *  _PASSWORD when set, so the password is never on the command line. */
    static Properties common(String bootstrap) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "compat-java-cases");
        String mechanism = System.getenv("COMPAT_SASL_MECHANISM");
        if (mechanism != null && !mechanism.isEmpty()) {
            String module = mechanism.equals("PLAIN")
                ? "org.apache.kafka.common.security.plain.PlainLoginModule"
                : "org.apache.kafka.common.security.scram.ScramLoginModule";
            p.put("security.protocol", "SASL_PLAINTEXT");
            p.put("sasl.mechanism", mechanism);
            p.put("sasl.jaas.config", module + " required username=" + quote(System.getenv("COMPAT_SASL_USER"))
                + " password=" + quote(System.getenv("COMPAT_SASL_PASSWORD")) + ";");
        }
        return p;
    }

    static KafkaProducer<byte[], byte[]> producer(String bootstrap, Map<String, Object> settings) {
        Properties p = common(bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.putAll(settings);
        return new KafkaProducer<>(p);
    }

    static KafkaConsumer<byte[], byte[]> consumer(String bootstrap, Map<String, Object> settings) {
        Properties p = common(bootstrap);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, Integer.toString(LARGE_LIMIT_BYTES));
        p.put(ConsumerConfig.FETCH_MAX_BYTES_CONFIG, Integer.toString(4 * LARGE_LIMIT_BYTES));
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.putAll(settings);
        return new KafkaConsumer<>(p);
    }

    /** Create topics and wait until every partition's leader serves it: ListOffsets, which
     *  the Admin client retries while the leader answers NOT_LEADER_OR_FOLLOWER, asked again
     *  while the broker it asks for metadata does not know the topic yet (a three-node
     *  cluster's brokers learn a new topic one after another). Without the wait, the
     *  idempotent producer's first batches to a new 200-partition topic meet
     *  NOT_LEADER_OR_FOLLOWER, the batches behind them OUT_OF_ORDER_SEQUENCE_NUMBER, and a few
     *  partitions never recover before delivery.timeout.ms (measured directly on Kafka 4.4.0,
     *  no proxy involved, in 2 of 3 runs). */
    static void createTopics(Admin admin, List<NewTopic> topics) throws Exception {
        admin.createTopics(topics).all().get();
        Map<TopicPartition, OffsetSpec> partitions = new HashMap<>();
        for (NewTopic t : topics) {
            for (int p = 0; p < t.numPartitions(); p++) {
                partitions.put(new TopicPartition(t.name(), p), OffsetSpec.latest());
            }
        }
        long deadline = System.currentTimeMillis() + 30_000;
        while (true) {
            try {
                admin.listOffsets(partitions).all().get();
                break;
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof UnknownTopicOrPartitionException)
                        || System.currentTimeMillis() > deadline) {
                    throw e;
                }
                Thread.sleep(100);
            }
        }
        for (NewTopic t : topics) {
            note("created", t.name(), null);
        }
    }

    /** Read every partition of topics from the beginning until each position reaches its end
     *  offset (for read_committed, the last stable offset); print what was consumed. */
    static void readToEnd(KafkaConsumer<byte[], byte[]> consumer, Collection<String> topics) throws Exception {
        List<TopicPartition> assigned = new ArrayList<>();
        for (String topic : topics) {
            consumer.partitionsFor(topic).forEach(p -> assigned.add(new TopicPartition(topic, p.partition())));
        }
        consumer.assign(assigned);
        Map<TopicPartition, Long> ends = consumer.endOffsets(assigned);
        consumer.seekToBeginning(assigned);
        long deadline = System.currentTimeMillis() + DEADLINE_MS;
        while (true) {
            boolean done = true;
            for (TopicPartition tp : assigned) {
                done &= consumer.position(tp) >= ends.get(tp);
            }
            if (done) {
                return;
            }
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("partitions not read to their end by the deadline");
            }
            for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                emit("consumed", r.topic(), r.partition(), r.offset(), r.key(), r.value(), r.headers(), null);
            }
        }
    }

    // ---- case ----

    static void runCase(String bootstrap, String kase, String base, String run) throws Exception {
        List<CaseTopic> topics = topics(kase, base, run);
        try (Admin admin = Admin.create(common(bootstrap))) {
            List<NewTopic> news = new ArrayList<>();
            for (CaseTopic t : topics) {
                news.add(new NewTopic(t.name(), t.partitions(), (short) 1).configs(t.configs()));
            }
            createTopics(admin, news);
        }
        for (CaseTopic t : topics) {
            Map<String, Object> settings = new HashMap<>();
            settings.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, t.compression().isEmpty() ? "none" : t.compression());
            if (t.configs().containsKey("max.message.bytes")) {
                settings.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, Integer.toString(LARGE_LIMIT_BYTES));
            }
            try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, settings)) {
                List<Future<RecordMetadata>> sent = new ArrayList<>();
                for (Rec r : t.records()) {
                    Integer partition = r.partition() >= 0 ? r.partition() : null;
                    sent.add(producer.send(new ProducerRecord<>(t.name(), partition, r.key(), r.value(), r.headers())));
                }
                for (int i = 0; i < sent.size(); i++) {
                    RecordMetadata m = sent.get(i).get();
                    Rec r = t.records().get(i);
                    emit("produced", t.name(), m.partition(), m.offset(), r.key(), r.value(), r.headers(), null);
                }
            }
        }
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, Map.of())) {
            readToEnd(consumer, topics.stream().map(CaseTopic::name).toList());
        }
    }

    // ---- transactions ----

    static void transactions(String bootstrap, String topic) throws Exception {
        try (Admin admin = Admin.create(common(bootstrap))) {
            createTopics(admin, List.of(new NewTopic(topic, 3, (short) 1)));
        }
        Map<String, Object> settings = Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, topic + "-txn");
        try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, settings)) {
            producer.initTransactions();
            String[] outcomes = {"commit", "abort", "commit"};
            for (int t = 0; t < outcomes.length; t++) {
                producer.beginTransaction();
                List<Future<RecordMetadata>> sent = new ArrayList<>();
                List<byte[]> values = new ArrayList<>();
                for (int i = 0; i < 100; i++) {
                    byte[] value = utf8("txn " + t + " " + outcomes[t] + " " + i);
                    values.add(value);
                    sent.add(producer.send(new ProducerRecord<>(topic, utf8("key-" + (i % 10)), value)));
                }
                producer.flush(); // the records reach the log before the transaction ends
                for (int i = 0; i < sent.size(); i++) {
                    RecordMetadata m = sent.get(i).get();
                    emit("produced", topic, m.partition(), m.offset(), utf8("key-" + (i % 10)), values.get(i), null, outcomes[t]);
                }
                if (outcomes[t].equals("commit")) {
                    producer.commitTransaction();
                } else {
                    producer.abortTransaction();
                }
                note("ended", topic, outcomes[t]);
            }
        }
        Map<String, Object> readCommitted = Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, readCommitted)) {
            readToEnd(consumer, List.of(topic));
        }
    }

    // ---- share groups (KIP-932) ----

    static void share(String bootstrap, String topic, String group, int count) throws Exception {
        try (Admin admin = Admin.create(common(bootstrap))) {
            createTopics(admin, List.of(new NewTopic(topic, 3, (short) 1)));
            ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
            AlterConfigOp earliest = new AlterConfigOp(
                new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(earliest))).all().get();
        }
        try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, Map.of())) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, utf8("key-" + (i % 10)), utf8("share " + i))));
            }
            for (int i = 0; i < count; i++) {
                RecordMetadata m = sent.get(i).get();
                emit("produced", topic, m.partition(), m.offset(), utf8("key-" + (i % 10)), utf8("share " + i), null, null);
            }
        }
        Properties p = common(bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        int seen = 0;
        long deadline = System.currentTimeMillis() + DEADLINE_MS;
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(p)) {
            consumer.subscribe(List.of(topic));
            while (seen < count) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException(seen + " of " + count + " records by the deadline");
                }
                // Implicit acknowledgement: the records of one poll are accepted by the next.
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(500));
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    Optional<Short> deliveries = r.deliveryCount();
                    emit("consumed", r.topic(), r.partition(), r.offset(), r.key(), r.value(), r.headers(),
                        "delivery " + deliveries.map(Object::toString).orElse("?"));
                    seen++;
                }
            }
            for (Optional<KafkaException> failed : consumer.commitSync().values()) {
                if (failed.isPresent()) {
                    throw failed.get();
                }
            }
            note("acknowledged", topic, Integer.toString(seen));
        }
    }

    // ---- admin ----

    static final BufferedReader STDIN = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));

    static void step(String event, String topic, String detail) throws Exception {
        note(event, topic, detail);
        if (STDIN.readLine() == null) {
            throw new IllegalStateException("stdin ended before \"next\"");
        }
    }

    static String topicConfig(Admin admin, String topic, String name) throws Exception {
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        ConfigEntry entry = admin.describeConfigs(List.of(resource)).all().get().get(resource).get(name);
        return entry == null ? "" : entry.value();
    }

    static void admin(String bootstrap, String topic, String principal) throws Exception {
        try (Admin admin = Admin.create(common(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
            step("created", topic, null);
            step("config", topic, "retention.ms=" + topicConfig(admin, topic, "retention.ms"));
            ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            AlterConfigOp set = new AlterConfigOp(new ConfigEntry("retention.ms", "3600000"), AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(set))).all().get();
            step("altered", topic, null);
            step("described", topic, "retention.ms=" + topicConfig(admin, topic, "retention.ms"));
            ResourcePattern pattern = new ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL);
            AccessControlEntry entry = new AccessControlEntry(principal, "*", AclOperation.READ, AclPermissionType.ALLOW);
            admin.createAcls(List.of(new AclBinding(pattern, entry))).all().get();
            step("acl-created", topic, principal);
            AclBindingFilter filter = new AclBindingFilter(
                new ResourcePatternFilter(ResourceType.TOPIC, topic, PatternType.LITERAL), AccessControlEntryFilter.ANY);
            Set<String> found = new TreeSet<>();
            for (AclBinding b : admin.describeAcls(filter).values().get()) {
                AccessControlEntry e = b.entry();
                found.add(e.principal() + " " + e.host() + " " + e.operation() + " " + b.pattern().name());
            }
            step("acls", topic, String.join("; ", found));
            Collection<AclBinding> deleted = admin.deleteAcls(List.of(filter)).all().get();
            step("acl-deleted", topic, Integer.toString(deleted.size()));
            admin.deleteTopics(List.of(topic)).all().get();
            step("deleted", topic, null);
        }
    }
}
