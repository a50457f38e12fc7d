// Strategy: a plain Java application that only knows the proxy's bootstrap address. It creates
// a topic (Admin), produces with the idempotent acks=all producer, then reads the records back
// in a consumer group from the earliest offset and commits synchronously. Values carry a run id
// so records from earlier runs are told apart. Compile and run it with run.sh next to it.
// TLS and SASL are flags translated to kafka-clients properties (PEM files as they are,
// KIP-651), and --config FILE adds any other client property; tests/compat runs this program
// as its Java client and checks every line it prints against the broker.
//
//   flags: --bootstrap HOST:PORT (127.0.0.1:9092) --topic T --group G --count N (10)
//          --keys K (0: one per record) --partitions P (3) --session-timeout-ms MS (6000)
//          --timeout-s S (60) --run-id ID (random)
//          --tls | --ca-file PEM  [--cert-file PEM --key-file PEM] [--no-hostname-check]
//          --sasl-mechanism M --sasl-username U  (password: --sasl-password or
//          $KAFKA_SASL_PASSWORD)   --config client.properties
//   exit:  0 when every record came back, 1 otherwise.

import java.io.FileInputStream;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class ProxyExample {
    private static final Set<String> SWITCHES = Set.of("--tls", "--no-hostname-check");

    private ProxyExample() {}

    public static void main(String[] args) throws Exception {
        Map<String, String> flags = parse(args);
        String bootstrap = flags.getOrDefault("--bootstrap", "127.0.0.1:9092");
        String topic = flags.getOrDefault("--topic", "examples-java");
        String group = flags.getOrDefault("--group", "examples-java");
        int count = Integer.parseInt(flags.getOrDefault("--count", "10"));
        int keys = Integer.parseInt(flags.getOrDefault("--keys", "0"));
        int partitions = Integer.parseInt(flags.getOrDefault("--partitions", "3"));
        int sessionTimeoutMs = Integer.parseInt(flags.getOrDefault("--session-timeout-ms", "6000"));
        double timeoutS = Double.parseDouble(flags.getOrDefault("--timeout-s", "60"));
        String runId = flags.getOrDefault("--run-id", UUID.randomUUID().toString().substring(0, 8));
        long deadline = System.currentTimeMillis() + (long) (timeoutS * 1000);
        Properties common = clientProperties(flags);
        common.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);

        if (!createTopic(common, topic, partitions, deadline)) {
            System.err.println("java: no answer from " + bootstrap + " within --timeout-s "
                + flags.getOrDefault("--timeout-s", "60"));
            System.exit(1);
        }
        int produced = produce(common, topic, runId, count, keys > 0 ? keys : count);
        int consumed = consume(common, topic, group, runId, produced, sessionTimeoutMs, deadline);
        System.out.println("java via " + bootstrap + ": produced " + produced + ", consumed "
            + consumed + " (run " + runId + ")");
        System.out.flush();
        System.exit(produced == count && consumed == count ? 0 : 1);
    }

    private static Map<String, String> parse(String[] args) {
        Map<String, String> flags = new HashMap<>();
        for (int i = 0; i < args.length; i++) {
            if (SWITCHES.contains(args[i])) {
                flags.put(args[i], "true");
            } else if (args[i].startsWith("--") && i + 1 < args.length) {
                flags.put(args[i], args[++i]);
            } else {
                System.err.println("unknown argument " + args[i] + " (see the header of ProxyExample.java)");
                System.exit(2);
            }
        }
        return flags;
    }

    /** Properties every client gets: --config's file, then TLS and SASL from the flags. */
    private static Properties clientProperties(Map<String, String> flags) throws IOException {
        Properties props = new Properties();
        if (flags.containsKey("--config")) {
            try (FileInputStream in = new FileInputStream(flags.get("--config"))) {
                props.load(in);
            }
        }
        boolean tls = flags.containsKey("--tls") || flags.containsKey("--ca-file")
            || flags.containsKey("--cert-file");
        if (flags.containsKey("--ca-file")) {
            props.put("ssl.truststore.type", "PEM");
            props.put("ssl.truststore.location", flags.get("--ca-file"));
        }
        if (flags.containsKey("--cert-file")) {
            // A PEM keystore given inline: the key, then the certificate chain (KIP-651).
            props.put("ssl.keystore.type", "PEM");
            props.put("ssl.keystore.key", Files.readString(Path.of(flags.get("--key-file"))));
            props.put("ssl.keystore.certificate.chain",
                Files.readString(Path.of(flags.get("--cert-file"))));
        }
        if (flags.containsKey("--no-hostname-check")) {
            props.put("ssl.endpoint.identification.algorithm", "");
        }
        String mechanism = flags.get("--sasl-mechanism");
        if (mechanism != null) {
            String module = mechanism.equals("PLAIN")
                ? "org.apache.kafka.common.security.plain.PlainLoginModule"
                : "org.apache.kafka.common.security.scram.ScramLoginModule";
            String password = flags.getOrDefault("--sasl-password", System.getenv("KAFKA_SASL_PASSWORD"));
            props.put("sasl.mechanism", mechanism);
            props.put("sasl.jaas.config", module + " required username=\"" + flags.get("--sasl-username")
                + "\" password=\"" + password + "\";");
        }
        if (tls || mechanism != null) {
            props.put("security.protocol", (mechanism != null ? "SASL_" : "") + (tls ? "SSL" : "PLAINTEXT"));
        }
        return props;
    }

    /**
     * Creates the topic (or finds it there); false when the cluster did not answer by the
     * deadline: the admin client's own timeout is 60 s whatever --timeout-s says.
     */
    private static boolean createTopic(Properties common, String topic, int partitions, long deadline)
            throws Exception {
        int leftMs = (int) Math.max(1, deadline - System.currentTimeMillis());
        CreateTopicsOptions options = new CreateTopicsOptions().timeoutMs(leftMs);
        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1)), options).all().get();
            System.out.println("topic " + topic + ": created");
        } catch (ExecutionException e) {
            if (e.getCause() instanceof TimeoutException) {
                return false;
            }
            if (!(e.getCause() instanceof TopicExistsException)) {
                throw e;
            }
            System.out.println("topic " + topic + ": exists");
        }
        System.out.flush();
        return true;
    }

    private static int produce(Properties common, String topic, String runId, int count, int keys)
            throws Exception {
        Properties props = new Properties();
        props.putAll(common);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            for (int i = 0; i < count; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, "key-" + (i % keys), runId + " record " + i)));
            }
            producer.flush();
            for (int i = 0; i < count; i++) {
                RecordMetadata md = sent.get(i).get();
                System.out.println("produced partition=" + md.partition() + " offset=" + md.offset()
                    + " key=key-" + (i % keys) + " value=" + runId + " record " + i);
            }
        }
        return sent.size();
    }

    private static int consume(Properties common, String topic, String group, String runId,
            int expected, int sessionTimeoutMs, long deadline) {
        Properties props = new Properties();
        props.putAll(common);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, Integer.toString(sessionTimeoutMs));
        props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, Integer.toString(sessionTimeoutMs / 4));
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        int seen = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            while (seen < expected && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    String key = r.key() == null ? "" : r.key();
                    String value = r.value() == null ? "" : r.value();
                    System.out.println("consumed partition=" + r.partition() + " offset=" + r.offset()
                        + " key=" + key + " value=" + value);
                    if (value.startsWith(runId + " ")) {
                        seen++; // an older run's record is shown but not counted
                    }
                }
            }
            consumer.commitSync();
            System.out.println("committed offsets for group " + group + ": " + consumer.committed(consumer.assignment()));
        }
        return seen;
    }
}
