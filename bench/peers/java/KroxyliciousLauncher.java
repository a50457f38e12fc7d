// Starts Kroxylicious from its runtime module the way its application's main does.
//
// Usage: java -cp 'libs/*:.' KroxyliciousLauncher CONFIG.yaml
// The Maven Central this machine reaches serves io.kroxylicious:kroxylicious-runtime but not
// kroxylicious-app, whose only code is the command-line main (io.kroxylicious.app.Kroxylicious).
// This does what that main's call() does in release 0.12.0, step for step: parse the YAML with
// Kroxylicious's own ConfigParser, enable the features unlocked by KROXYLICIOUS_UNLOCK_<NAME>
// (system property or environment variable), build KafkaProxy with the parser as its plugin
// registry, start it and block until it stops. Left out: the picocli parsing of "-c FILE" (the
// file is the one argument) and the banner and version lines it logs.
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;

import io.kroxylicious.proxy.KafkaProxy;
import io.kroxylicious.proxy.config.ConfigParser;
import io.kroxylicious.proxy.config.Configuration;
import io.kroxylicious.proxy.internal.config.Feature;
import io.kroxylicious.proxy.internal.config.Features;

public final class KroxyliciousLauncher {
    public static void main(String[] args) throws Exception {
        ConfigParser configParser = new ConfigParser();
        try (InputStream stream = Files.newInputStream(Path.of(args[0]))) {
            Configuration config = configParser.parseConfiguration(stream);
            try (KafkaProxy kafkaProxy = new KafkaProxy(configParser, config, features())) {
                kafkaProxy.startup();
                kafkaProxy.block();
            }
        }
    }

    private static Features features() {
        Features.FeaturesBuilder builder = Features.builder();
        for (Feature feature : Feature.values()) {
            String name = "KROXYLICIOUS_UNLOCK_" + feature.name();
            if (Boolean.parseBoolean(System.getProperty(name, System.getenv(name)))) {
                builder.enable(feature);
            }
        }
        return builder.build();
    }
}
