package registry.tests.spring;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.netflix.appinfo.ApplicationInfoManager;
import com.netflix.appinfo.InstanceInfo;
import com.netflix.discovery.EurekaClient;
import com.netflix.discovery.shared.Applications;
import com.netflix.discovery.shared.transport.jersey.TransportClientFactories;

import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.cloud.client.ServiceInstance;
import org.springframework.cloud.client.discovery.DiscoveryClient;
import org.springframework.context.ApplicationContext;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PutMapping;
import org.springframework.web.bind.annotation.RestController;

/**
 * A service as Spring users write one, with a small API for the tests that drive it: what
 * Spring's DiscoveryClient lists, its own status changed, and the Eureka client's own view.
 */
@SpringBootApplication
@RestController
public class SpringClientApplication {

	private final DiscoveryClient discovery;

	private final EurekaClient eureka;

	private final ApplicationInfoManager manager;

	private final ApplicationContext context;

	public SpringClientApplication(DiscoveryClient discovery, EurekaClient eureka,
			ApplicationInfoManager manager, ApplicationContext context) {
		this.discovery = discovery;
		this.eureka = eureka;
		this.manager = manager;
		this.context = context;
	}

	public static void main(String[] args) {
		SpringApplication.run(SpringClientApplication.class, args);
	}

	/** The instances of a service as Spring's DiscoveryClient gives them (UP ones only, by default). */
	@GetMapping("/seen/{service}")
	public List<Map<String, Object>> seen(@PathVariable String service) {
		return discovery.getInstances(service).stream().map(SpringClientApplication::describe).toList();
	}

	/** This service's own status, changed as an application does: the client tells the registry. */
	@PutMapping("/status/{status}")
	public Map<String, Object> status(@PathVariable String status) {
		manager.setInstanceStatus(InstanceInfo.InstanceStatus.valueOf(status));
		return state();
	}

	/** The Eureka client's own view: this instance, its copy's hashcode, the transport in use. */
	@GetMapping("/state")
	public Map<String, Object> state() {
		Applications applications = eureka.getApplications();
		Map<String, Object> state = new LinkedHashMap<>();
		state.put("instanceId", manager.getInfo().getInstanceId());
		state.put("status", manager.getInfo().getStatus().name());
		state.put("appsHashCode", applications.getAppsHashCode());
		state.put("reconcileHashCode", applications.getReconcileHashCode());
		state.put("transport", context.getBeansOfType(TransportClientFactories.class).values().stream()
			.map(factories -> factories.getClass().getSimpleName()).toList());
		return state;
	}

	private static Map<String, Object> describe(ServiceInstance instance) {
		Map<String, Object> described = new LinkedHashMap<>();
		described.put("instanceId", instance.getInstanceId());
		described.put("host", instance.getHost());
		described.put("port", instance.getPort());
		described.put("uri", instance.getUri().toString());
		described.put("metadata", instance.getMetadata());
		return described;
	}

}
