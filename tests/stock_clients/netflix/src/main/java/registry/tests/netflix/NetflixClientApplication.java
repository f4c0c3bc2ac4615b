package registry.tests.netflix;

import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;

import com.netflix.appinfo.ApplicationInfoManager;
import com.netflix.appinfo.InstanceInfo;
import com.netflix.appinfo.MyDataCenterInstanceConfig;
import com.netflix.appinfo.providers.EurekaConfigBasedInstanceInfoProvider;
import com.netflix.discovery.DefaultEurekaClientConfig;
import com.netflix.discovery.DiscoveryClient;
import com.netflix.discovery.Jersey3DiscoveryClientOptionalArgs;
import com.netflix.discovery.shared.Applications;
import com.netflix.discovery.shared.transport.jersey.TransportClientFactories;
import com.netflix.discovery.shared.transport.jersey3.Jersey3TransportClientFactories;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;

/**
 * A service as users of Netflix's Eureka client write one without Spring, with the same small
 * API as the Spring service for the tests that drive it: what the client lists of a service,
 * its own status changed, and the client's own view. SIGTERM shuts the client down, which
 * cancels the registration.
 */
public final class NetflixClientApplication {

	private final ApplicationInfoManager manager;

	private final DiscoveryClient eureka;

	private final TransportClientFactories<?> transport;

	private NetflixClientApplication(ApplicationInfoManager manager, DiscoveryClient eureka,
			TransportClientFactories<?> transport) {
		this.manager = manager;
		this.eureka = eureka;
		this.transport = transport;
	}

	public static void main(String[] args) throws IOException {
		int port = Integer.parseInt(System.getProperty("control.port"));
		MyDataCenterInstanceConfig instanceConfig = new MyDataCenterInstanceConfig();
		InstanceInfo info = new EurekaConfigBasedInstanceInfoProvider(instanceConfig).get();
		ApplicationInfoManager manager = new ApplicationInfoManager(instanceConfig, info);
		Jersey3TransportClientFactories transport = Jersey3TransportClientFactories.getInstance();
		DiscoveryClient eureka = new DiscoveryClient(manager, new DefaultEurekaClientConfig(), transport,
				new Jersey3DiscoveryClientOptionalArgs());
		manager.setInstanceStatus(InstanceInfo.InstanceStatus.UP);
		NetflixClientApplication application = new NetflixClientApplication(manager, eureka, transport);
		HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 0);
		server.createContext("/", application::answer);
		server.start();
		Runtime.getRuntime().addShutdownHook(new Thread(() -> {
			server.stop(0);
			eureka.shutdown();
		}));
	}

	private void answer(HttpExchange exchange) throws IOException {
		String[] path = exchange.getRequestURI().getPath().split("/");
		String method = exchange.getRequestMethod();
		String body;
		if (method.equals("GET") && path.length == 3 && path[1].equals("seen")) {
			body = seen(path[2]);
		}
		else if (method.equals("PUT") && path.length == 3 && path[1].equals("status")) {
			manager.setInstanceStatus(InstanceInfo.InstanceStatus.valueOf(path[2]));
			body = state();
		}
		else if (method.equals("GET") && path.length == 2 && path[1].equals("state")) {
			body = state();
		}
		else {
			exchange.sendResponseHeaders(404, -1);
			exchange.close();
			return;
		}
		byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
		exchange.getResponseHeaders().set("Content-Type", "application/json");
		exchange.sendResponseHeaders(200, bytes.length);
		try (OutputStream out = exchange.getResponseBody()) {
			out.write(bytes);
		}
	}

	/** The UP instances of a service, by its VIP address, as the client's lookups give them. */
	private String seen(String vipAddress) {
		List<InstanceInfo> instances = eureka.getInstancesByVipAddress(vipAddress, false);
		return instances.stream()
			.map(instance -> object(Map.of("instanceId", instance.getInstanceId(), "host", instance.getHostName(),
					"port", String.valueOf(instance.getPort()))))
			.collect(Collectors.joining(",", "[", "]"));
	}

	private String state() {
		Applications applications = eureka.getApplications();
		String fields = object(Map.of("instanceId", manager.getInfo().getInstanceId(), "status",
				manager.getInfo().getStatus().name(), "appsHashCode", applications.getAppsHashCode()));
		String transportName = quoted(transport.getClass().getSimpleName());
		return fields.substring(0, fields.length() - 1) + ",\"transport\":[" + transportName + "]}";
	}

	/** A flat JSON object of strings (the values here need no escaping beyond quotes). */
	private static String object(Map<String, String> fields) {
		return fields.entrySet()
			.stream()
			.map(field -> quoted(field.getKey()) + ":" + quoted(field.getValue()))
			.collect(Collectors.joining(",", "{", "}"));
	}

	private static String quoted(String text) {
		return "\"" + text.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
	}

}
