// The request counters of one Apache Kafka broker, read over JMX (JDK only, no dependencies).
//
// Usage: java RequestMeters HOST:PORT
// Connects once, then answers each line read from stdin with one line on stdout: a JSON object
// of request name -> completed requests so far, summed over the API versions Kafka keeps a
// meter for, e.g. {"Fetch": 120, "FetchConsumer": 118, "FetchFollower": 2, "Produce": 40}.
// The names are the `request` key of Kafka's
// kafka.network:type=RequestMetrics,name=RequestsPerSec,request=NAME,version=V meters (one per
// API and version; FetchConsumer and FetchFollower split Fetch by who asked). A persistent
// process, so a benchmark's window is bounded by two quick reads, not by JVM start-ups.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.TreeMap;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

public final class RequestMeters {
    private static final String PATTERN =
            "kafka.network:type=RequestMetrics,name=RequestsPerSec,*";

    public static void main(String[] args) throws Exception {
        JMXServiceURL url = new JMXServiceURL("service:jmx:rmi:///jndi/rmi://" + args[0] + "/jmxrmi");
        try (JMXConnector connector = JMXConnectorFactory.connect(url)) {
            MBeanServerConnection server = connector.getMBeanServerConnection();
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            while (in.readLine() != null) {
                System.out.println(toJson(counts(server)));
                System.out.flush();
            }
        }
    }

    private static Map<String, Long> counts(MBeanServerConnection server) throws Exception {
        Map<String, Long> counts = new TreeMap<>();
        for (ObjectName name : server.queryNames(new ObjectName(PATTERN), null)) {
            String request = name.getKeyProperty("request");
            if (request == null) {
                continue;
            }
            long count = ((Number) server.getAttribute(name, "Count")).longValue();
            counts.merge(request, count, Long::sum);
        }
        return counts;
    }

    private static String toJson(Map<String, Long> counts) {
        StringBuilder out = new StringBuilder("{");
        for (Map.Entry<String, Long> entry : counts.entrySet()) {
            if (out.length() > 1) {
                out.append(", ");
            }
            out.append('"').append(entry.getKey()).append("\": ").append(entry.getValue());
        }
        return out.append('}').toString();
    }
}
