// Strategy: one member of a consumer group, as a process the Python driver
// (tests/compat/_group_consume.py) starts, watches and stops, so that members can join and
// leave a group mid-way while the driver checks that every record is delivered exactly once.
//
// Exactly once across a rebalance, the way a Java application does it: auto-commit is off;
// the program commits the offsets of the records it has *processed* (printed), synchronously,
// in onPartitionsRevoked (eager protocol: the callback runs before the partitions move) and
// once more before it closes. A member that gets a partition starts at that committed
// offset, so a missing or late commit, or a fetch that returns the wrong records, shows up
// as a duplicate or a gap. Records are processed at most max_rate per second (sleeping
// between polls) so that joining and leaving happen while there is still work to move.
//
// With protocol "consumer" the member speaks KIP-848 (group.protocol=consumer): the broker
// assigns partitions incrementally, and onPartitionsRevoked still runs (with the partitions
// taken away) before they move, so the same commit keeps delivery exactly once.
//
//   args  : bootstrap topic group session_timeout_ms max_rate classic|consumer
//   stdin : "stop" (or EOF) -> commit, close (leave the group), exit 0
//   stdout: TSV lines, flushed after each poll:
//             assigned  <p,p,...>
//             revoked   <p,p,...>
//             consumed  <partition> <offset> <value>
//             committed <partition> <offset>
//             closed

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.StringJoiner;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public final class GroupConsume {
    private static final int MAX_POLL_RECORDS = 100;
    private static volatile boolean stopping = false;

    private GroupConsume() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 6) {
            System.err.println("usage: GroupConsume bootstrap topic group session_timeout_ms max_rate classic|consumer");
            System.exit(1);
        }
        String topic = args[1];
        int sessionTimeoutMs = Integer.parseInt(args[3]);
        double maxRate = Double.parseDouble(args[4]);
        Thread stdin = new Thread(GroupConsume::waitForStop, "stdin");
        stdin.setDaemon(true);
        stdin.start();

        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, args[2]);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, Integer.toString(MAX_POLL_RECORDS));
        if (args[5].equals("consumer")) {
            // KIP-848: the broker assigns and times the group; the client sets neither.
            props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        } else {
            // Eager range assignment: every member gives up all its partitions on a rebalance.
            props.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, RangeAssignor.class.getName());
            props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, Integer.toString(sessionTimeoutMs));
            props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, Integer.toString(sessionTimeoutMs / 4));
        }
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());

        Map<TopicPartition, OffsetAndMetadata> processed = new HashMap<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    commit(consumer, processed, partitions);
                    System.out.println("revoked\t" + join(partitions));
                    System.out.flush();
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    System.out.println("assigned\t" + join(partitions));
                    System.out.flush();
                }
            });
            while (!stopping) {
                long started = System.nanoTime();
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(100));
                for (ConsumerRecord<String, String> r : records) {
                    System.out.println("consumed\t" + r.partition() + "\t" + r.offset() + "\t" + r.value());
                    processed.put(new TopicPartition(r.topic(), r.partition()),
                        new OffsetAndMetadata(r.offset() + 1));
                }
                System.out.flush();
                long budgetNs = (long) (records.count() / maxRate * 1e9);
                long sleepMs = (budgetNs - (System.nanoTime() - started)) / 1_000_000;
                if (sleepMs > 0) {
                    Thread.sleep(sleepMs);
                }
            }
            commit(consumer, processed, consumer.assignment());
        }
        System.out.println("closed");
        System.out.flush();
    }

    private static void commit(
            KafkaConsumer<String, String> consumer,
            Map<TopicPartition, OffsetAndMetadata> processed,
            Collection<TopicPartition> partitions) {
        Map<TopicPartition, OffsetAndMetadata> owned = new HashMap<>();
        for (TopicPartition tp : partitions) {
            OffsetAndMetadata next = processed.remove(tp);
            if (next != null) {
                owned.put(tp, next);
            }
        }
        if (owned.isEmpty()) {
            return;
        }
        consumer.commitSync(owned);
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : owned.entrySet()) {
            System.out.println("committed\t" + e.getKey().partition() + "\t" + e.getValue().offset());
        }
    }

    private static String join(Collection<TopicPartition> partitions) {
        StringJoiner joined = new StringJoiner(",");
        for (TopicPartition tp : partitions) {
            joined.add(Integer.toString(tp.partition()));
        }
        return joined.toString();
    }

    private static void waitForStop() {
        try (BufferedReader in = new BufferedReader(
                new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            for (String line = in.readLine(); line != null; line = in.readLine()) {
                if (line.trim().equals("stop")) {
                    break;
                }
            }
        } catch (Exception ignored) {
            // EOF or a closed pipe means the same as "stop".
        }
        stopping = true;
    }
}
