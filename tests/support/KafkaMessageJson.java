// Kafka's own message codec as a line-oriented tool, for tests/support/kafka_bytes_capture.py.
//
// Each line on stdin is one command; each answer is one line on stdout:
//   encode <Message> <version> <json>   ->  the body as Kafka encodes it, in hex
//   decode <Message> <version> <hex>    ->  the body as Kafka decodes it, as Kafka's JSON
// <Message> is a schema name such as ApiVersionsRequest; the classes are the ones Kafka
// generates from its schemas (org.apache.kafka.common.message.<Message>Data and its
// JsonConverter), so this is the encoding every Java client and broker of that version uses.
//
// Run with the kafka-clients jar and Jackson on the classpath, as a single-file program:
//   java -cp '<kafka libs>/*' tests/support/KafkaMessageJson.java

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.Message;
import org.apache.kafka.common.protocol.MessageUtil;
import org.apache.kafka.common.protocol.Readable;

public class KafkaMessageJson {
    private static final String PACKAGE = "org.apache.kafka.common.message.";

    public static void main(String[] args) throws Exception {
        ObjectMapper mapper = new ObjectMapper();
        HexFormat hex = HexFormat.of();
        BufferedReader in =
                new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] parts = line.split(" ", 4);
            String name = parts[1];
            short version = Short.parseShort(parts[2]);
            Class<?> data = Class.forName(PACKAGE + name + "Data");
            Class<?> converter = Class.forName(PACKAGE + name + "DataJsonConverter");
            if (parts[0].equals("encode")) {
                JsonNode json = mapper.readTree(parts[3]);
                Message message = (Message) converter
                        .getMethod("read", JsonNode.class, short.class)
                        .invoke(null, json, version);
                ByteBuffer body = MessageUtil.toByteBufferAccessor(message, version).buffer();
                System.out.println(hex.formatHex(MessageUtil.byteBufferToArray(body)));
            } else {
                ByteBuffer body = ByteBuffer.wrap(hex.parseHex(parts[3]));
                Object message = data.getConstructor(Readable.class, short.class)
                        .newInstance(new ByteBufferAccessor(body), version);
                if (body.hasRemaining()) {
                    throw new IllegalStateException(body.remaining() + " bytes left over");
                }
                JsonNode json = (JsonNode) converter
                        .getMethod("write", data, short.class)
                        .invoke(null, message, version);
                System.out.println(mapper.writeValueAsString(json));
            }
            System.out.flush();
        }
    }
}
