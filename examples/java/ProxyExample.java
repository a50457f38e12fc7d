// Strategy: a plain Java application that only knows the proxy's bootstrap address. It creates
// a topic (Admin), produces with the idempotent acks=all producer, then reads the records back
// in a consumer group from the earliest offset and commits synchronously. Values carry a run id
// so records from earlier runs are told apart. Compile and run it with run.sh next to it.
//
//   args: [bootstrap] [count] [session_timeout_ms]     defaults: 127.0.0.1:9092 10 6000
//   exit: 0 when every record came back, 1 otherwise.

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class ProxyExample {
    private static final String TOPIC = "examples-java";
    private static final String GROUP = "examples-java";

    private ProxyExample() {}

    public static void main(String[] args) throws Exception {
        String bootstrap = args.length > 0 ? args[0] : "127.0.0.1:9092";
        int count = args.length > 1 ? Integer.parseInt(args[1]) : 10;
        int sessionTimeoutMs = args.length > 2 ? Integer.parseInt(args[2]) : 6000;
        String runId = UUID.randomUUID().toString().substring(0, 8);
        long deadline = System.currentTimeMillis() + 60_000;

        createTopic(bootstrap);
        int produced = produce(bootstrap, runId, count);
        int consumed = consume(bootstrap, runId, count, sessionTimeoutMs, deadline);
        System.out.println("java via " + bootstrap + ": produced " + produced + ", consumed "
            + consumed + " (run " + runId + ")");
        System.out.flush();
        System.exit(produced == count && consumed == count ? 0 : 1);
    }

    private static void createTopic(String bootstrap) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(props)) {
            admin.createTopics(List.of(new NewTopic(TOPIC, 3, (short) 1))).all().get();
            System.out.println("topic " + TOPIC + ": created");
        } catch (ExecutionException e) {
            if (!(e.getCause() instanceof TopicExistsException)) {
                throw e;
            }
            System.out.println("topic " + TOPIC + ": exists");
        }
    }

    private static int produce(String bootstrap, String runId, int count) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            for (int i = 0; i < count; i++) {
                sent.add(producer.send(new ProducerRecord<>(TOPIC, "key-" + i, runId + " record " + i)));
            }
            producer.flush();
            for (int i = 0; i < count; i++) {
                RecordMetadata md = sent.get(i).get();
                System.out.println("produced partition=" + md.partition() + " offset=" + md.offset()
                    + " key=key-" + i + " value=" + runId + " record " + i);
            }
        }
        return sent.size();
    }

    private static int consume(
            String bootstrap, String runId, int expected, int sessionTimeoutMs, long deadline) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, GROUP);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, Integer.toString(sessionTimeoutMs));
        props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, Integer.toString(sessionTimeoutMs / 4));
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        int seen = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(TOPIC));
            while (seen < expected && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    if (!r.value().startsWith(runId)) {
                        continue; // an older run's record
                    }
                    seen++;
                    System.out.println("consumed partition=" + r.partition() + " offset=" + r.offset()
                        + " key=" + r.key() + " value=" + r.value());
                }
            }
            consumer.commitSync();
            System.out.println("committed offsets for group " + GROUP + ": " + consumer.committed(consumer.assignment()));
        }
        return seen;
    }
}
