package deploytest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/ferrylabs/ferry/consumer"
	"github.com/ferrylabs/ferry/internal/testcerts"
)

// overlays are the kustomize overlays users deploy; each renders a whole
// Ferry (consumers, pushers, gateway).
var overlays = []string{"tsdb", "tsdb-two-groups", "remote-write", "tsdb-secured", "strimzi"}

// rendered is one overlay's objects, decoded strictly into k8s.io/api types.
type rendered struct {
	configMaps   map[string]*corev1.ConfigMap
	secrets      map[string]*corev1.Secret
	services     []*corev1.Service
	statefulSets []*appsv1.StatefulSet
	deployments  []*appsv1.Deployment
	pdbs         []*policyv1.PodDisruptionBudget
	hpas         []*autoscalingv2.HorizontalPodAutoscaler
	kafkaTopics  []*kafkaTopic
	kafkaUsers   []*kafkaUser
}

// kustomizeMu serializes kustomize builds: its patch transformer shares
// state between builds (the race detector caught two overlays' builds in
// parallel subtests writing it), so only the checks after it run in
// parallel.
var kustomizeMu sync.Mutex

// render builds an overlay with kustomize's own API, as `kubectl apply -k`
// would, and decodes every object; an unknown kind or field fails.
func render(t *testing.T, overlay string) rendered {
	t.Helper()
	dir := filepath.Join(repoRoot(t), "deploy", "kubernetes", "overlays", overlay)
	kustomizeMu.Lock()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	kustomizeMu.Unlock()
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out := rendered{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	for _, r := range m.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatalf("%s: %v", r.CurId(), err)
		}
		var obj any
		switch r.GetKind() {
		case "ConfigMap":
			o := &corev1.ConfigMap{}
			out.configMaps[r.GetName()], obj = o, o
		case "Secret":
			o := &corev1.Secret{}
			out.secrets[r.GetName()], obj = o, o
		case "Service":
			o := &corev1.Service{}
			out.services, obj = append(out.services, o), o
		case "StatefulSet":
			o := &appsv1.StatefulSet{}
			out.statefulSets, obj = append(out.statefulSets, o), o
		case "Deployment":
			o := &appsv1.Deployment{}
			out.deployments, obj = append(out.deployments, o), o
		case "PodDisruptionBudget":
			o := &policyv1.PodDisruptionBudget{}
			out.pdbs, obj = append(out.pdbs, o), o
		case "HorizontalPodAutoscaler":
			o := &autoscalingv2.HorizontalPodAutoscaler{}
			out.hpas, obj = append(out.hpas, o), o
		case "KafkaTopic":
			o := &kafkaTopic{}
			out.kafkaTopics, obj = append(out.kafkaTopics, o), o
		case "KafkaUser":
			o := &kafkaUser{}
			out.kafkaUsers, obj = append(out.kafkaUsers, o), o
		default:
			t.Fatalf("%s: kind %s is not checked by this test: add it", r.CurId(), r.GetKind())
		}
		if err := yaml.UnmarshalStrict(y, obj); err != nil {
			t.Fatalf("%s does not decode strictly into k8s.io/api: %v\n%s", r.CurId(), err, y)
		}
	}
	return out
}

// workload is a StatefulSet or Deployment with the names its pods get.
type workload struct {
	kind, name string
	template   corev1.PodTemplateSpec
	selector   map[string]string
	podNames   []string
}

func (r rendered) workloads() []workload {
	var ws []workload
	for _, s := range r.statefulSets {
		w := workload{kind: "StatefulSet", name: s.Name, template: s.Spec.Template, selector: s.Spec.Selector.MatchLabels}
		start := int32(0)
		if s.Spec.Ordinals != nil {
			start = s.Spec.Ordinals.Start
		}
		replicas := int32(1)
		if s.Spec.Replicas != nil {
			replicas = *s.Spec.Replicas
		}
		for i := start; i < start+replicas; i++ {
			w.podNames = append(w.podNames, fmt.Sprintf("%s-%d", s.Name, i))
		}
		ws = append(ws, w)
	}
	for _, d := range r.deployments {
		ws = append(ws, workload{kind: "Deployment", name: d.Name, template: d.Spec.Template, selector: d.Spec.Selector.MatchLabels,
			podNames: []string{d.Name + "-7d4b9c8f6-x2x7q"}})
	}
	return ws
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expandArgs resolves $(VAR) references the way the kubelet does, from the
// container's env: literal values, ConfigMap keys and the pod's name.
func (r rendered) expandArgs(t *testing.T, c corev1.Container, podName string) []string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = envRef.ReplaceAllStringFunc(e.Value, func(m string) string { return env[m[2:len(m)-1]] })
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = podName
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm, ok := r.configMaps[ref.Name]
			if !ok {
				t.Fatalf("container %s: env %s: no ConfigMap %q", c.Name, e.Name, ref.Name)
			}
			v, ok := cm.Data[ref.Key]
			if !ok {
				t.Fatalf("container %s: env %s: ConfigMap %q has no key %q", c.Name, e.Name, ref.Name, ref.Key)
			}
			env[e.Name] = v
		default:
			t.Fatalf("container %s: env %s: a source this test does not resolve", c.Name, e.Name)
		}
	}
	var args []string
	for _, a := range append(c.Command[1:len(c.Command):len(c.Command)], c.Args...) {
		args = append(args, envRef.ReplaceAllStringFunc(a, func(m string) string {
			v, ok := env[m[2:len(m)-1]]
			if !ok {
				t.Errorf("container %s: %q refers to an undefined variable", c.Name, a)
			}
			return v
		}))
	}
	return mountedFiles(t, c, args)
}

// mountedFiles points flag values under the container's read-only volume
// mounts (Secrets: the SASL password, CA certificates) at stand-in files in a
// temporary directory, so that the binaries' Validate, which opens those
// files to fail fast at start-up, checks the rest of the command line as
// it would in the pod. A CA-looking file gets a real PEM certificate.
func mountedFiles(t *testing.T, c corev1.Container, args []string) []string {
	t.Helper()
	root := t.TempDir()
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		name, value, ok := strings.Cut(a, "=")
		if !ok || !strings.HasPrefix(name, "-") {
			continue
		}
		for _, m := range c.VolumeMounts {
			if !m.ReadOnly {
				continue // A writable volume: the writability checks handle it.
			}
			rel, under := strings.CutPrefix(value, strings.TrimSuffix(m.MountPath, "/")+"/")
			if !under {
				continue
			}
			path := filepath.Join(root, m.Name, rel)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(path, ".crt") || strings.HasSuffix(path, ".pem") {
				ca := testcerts.NewCA(t, "deploytest")
				if err := os.Rename(ca.CertPath, path); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(path, []byte("stand-in\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			out[i] = name + "=" + path
		}
	}
	return out
}

func TestKustomizeOverlaysRenderIntoValidObjects(t *testing.T) {
	t.Parallel()
	uid, gid := imageUser(t)
	for _, overlay := range overlays {
		t.Run(overlay, func(t *testing.T) {
			t.Parallel()
			r := render(t, overlay)
			parsed := map[string]map[string]parsedCommand{} // workload -> pod -> command
			for _, w := range r.workloads() {
				parsed[w.name] = checkWorkload(t, r, w, uid, gid)
			}
			checkServices(t, r)
			checkGoverningServices(t, r)
			checkPartitions(t, r, parsed)
			checkPusherAddresses(t, r, parsed)
			for _, h := range r.hpas {
				if h.Spec.ScaleTargetRef.Kind != "Deployment" || !r.hasDeployment(h.Spec.ScaleTargetRef.Name) {
					t.Errorf("HPA %s scales %s %s, which this overlay does not have", h.Name, h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name)
				}
			}
		})
	}
}

func (r rendered) hasDeployment(name string) bool {
	for _, d := range r.deployments {
		if d.Name == name {
			return true
		}
	}
	return false
}

// checkWorkload checks one workload's pod template and returns each pod's
// parsed Ferry command line.
func checkWorkload(t *testing.T, r rendered, w workload, uid, gid int64) map[string]parsedCommand {
	t.Helper()
	where := w.kind + " " + w.name
	spec := w.template.Spec
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != uid ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: the pod must run as non-root user %d (the image's) with the RuntimeDefault seccomp profile", where, uid)
	}
	if len(spec.TopologySpreadConstraints) == 0 {
		t.Errorf("%s: no topology spread constraints", where)
	}
	if a := w.template.Annotations; a["prometheus.io/scrape"] != "true" || a["prometheus.io/path"] != "/metrics" {
		t.Errorf("%s: missing the Prometheus scrape annotations", where)
	}
	if n := r.pdbsSelecting(w.template.Labels); n != 1 {
		t.Errorf("%s: %d PodDisruptionBudgets select its pods; want 1 (the eviction API refuses a pod under several)", where, n)
	}
	out := map[string]parsedCommand{}
	for _, c := range spec.Containers {
		if len(c.Command) == 0 {
			t.Fatalf("%s: container %s has no command: Ferry's image has no entrypoint", where, c.Name)
		}
		if name, _, _ := strings.Cut(c.Image, ":"); name != imageName {
			t.Errorf("%s: container %s runs image %q, not the %q the Dockerfile builds", where, c.Name, c.Image, imageName)
		}
		checkContainerHardening(t, where, c)
		for _, pod := range w.podNames {
			cmd, err := parseCommand(t, c.Command[0], r.expandArgs(t, c, pod))
			if err != nil {
				t.Errorf("%s pod %s: %v", where, pod, err)
				continue
			}
			out[pod] = cmd
			checkPorts(t, where, c, cmd, w.template.Annotations)
			checkGrace(t, where, spec, cmd)
			checkWritable(t, where, spec, c, cmd, gid)
		}
	}
	return out
}

func (r rendered) pdbsSelecting(podLabels map[string]string) int {
	var n int
	for _, p := range r.pdbs {
		if p.Spec.Selector != nil && labels.SelectorFromSet(p.Spec.Selector.MatchLabels).Matches(labels.Set(podLabels)) {
			n++
		}
	}
	return n
}

func checkContainerHardening(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("%s: container %s must have a read-only root filesystem, no privilege escalation and drop ALL capabilities", where, c.Name)
	}
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[res]; !ok {
			t.Errorf("%s: container %s has no %s request", where, c.Name, res)
		}
		if _, ok := c.Resources.Limits[res]; !ok {
			t.Errorf("%s: container %s has no %s limit", where, c.Name, res)
		}
	}
	for _, p := range []struct {
		probe *corev1.Probe
		path  string
	}{{c.ReadinessProbe, "/ready"}, {c.LivenessProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path {
			t.Errorf("%s: container %s needs an HTTP probe of %s", where, c.Name, p.path)
		}
	}
}

// containerPort resolves a probe's or Service's port, by number or name.
func containerPort(c corev1.Container, p string) (int, bool) {
	if n, err := strconv.Atoi(p); err == nil {
		return n, true
	}
	for _, cp := range c.Ports {
		if cp.Name == p {
			return int(cp.ContainerPort), true
		}
	}
	return 0, false
}

func checkPorts(t *testing.T, where string, c corev1.Container, cmd parsedCommand, annotations map[string]string) {
	t.Helper()
	for _, cp := range c.Ports {
		if _, ok := cmd.ports[int(cp.ContainerPort)]; !ok {
			t.Errorf("%s: container port %d (%s) is not one %s listens on (%v)", where, cp.ContainerPort, cp.Name, cmd.name, cmd.ports)
		}
	}
	for _, probe := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if probe == nil || probe.HTTPGet == nil {
			continue
		}
		n, ok := containerPort(c, probe.HTTPGet.Port.String())
		if f := cmd.ports[n]; !ok || !strings.HasPrefix(f, "http.") {
			t.Errorf("%s: probe %s on port %s, which is not %s's HTTP port (%v)", where, probe.HTTPGet.Path, probe.HTTPGet.Port.String(), cmd.name, cmd.ports)
		}
	}
	n, err := strconv.Atoi(annotations["prometheus.io/port"])
	if f := cmd.ports[n]; err != nil || f != "http.listen-address" {
		t.Errorf("%s: scraped on port %q, which is not %s's HTTP port (%v)", where, annotations["prometheus.io/port"], cmd.name, cmd.ports)
	}
}

// checkGrace: SIGKILL must not cut a graceful stop the flags allow.
func checkGrace(t *testing.T, where string, spec corev1.PodSpec, cmd parsedCommand) {
	t.Helper()
	f := cmd.flags.Lookup("shutdown-timeout")
	if f == nil {
		return
	}
	d, err := time.ParseDuration(f.Value.String())
	if err != nil {
		t.Fatalf("%s: -shutdown-timeout %q: %v", where, f.Value.String(), err)
	}
	if spec.TerminationGracePeriodSeconds == nil || time.Duration(*spec.TerminationGracePeriodSeconds)*time.Second <= d {
		t.Errorf("%s: terminationGracePeriodSeconds must exceed -shutdown-timeout=%s", where, d)
	}
}

// checkWritable: every directory the binary writes is on a writable volume
// whose group is the image user's (fsGroup), never the read-only root.
func checkWritable(t *testing.T, where string, spec corev1.PodSpec, c corev1.Container, cmd parsedCommand, gid int64) {
	t.Helper()
	for _, dir := range cmd.writes {
		var mount *corev1.VolumeMount
		for i, m := range c.VolumeMounts {
			if dir == m.MountPath || strings.HasPrefix(dir, strings.TrimSuffix(m.MountPath, "/")+"/") {
				mount = &c.VolumeMounts[i]
			}
		}
		if mount == nil || mount.ReadOnly {
			t.Errorf("%s: %s writes %s, which is on no writable volume (the root filesystem is read-only)", where, cmd.name, dir)
			continue
		}
		if sc := spec.SecurityContext; sc == nil || sc.FSGroup == nil || *sc.FSGroup != gid {
			t.Errorf("%s: %s writes %s on volume %s, but the pod's fsGroup is not the image's group %d", where, cmd.name, dir, mount.Name, gid)
		}
	}
}

// checkServices: every Service selects pods, and every port it targets is
// one the selected binary listens on.
func checkServices(t *testing.T, r rendered) {
	t.Helper()
	for _, s := range r.services {
		var matched bool
		for _, w := range r.workloads() {
			if !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(w.template.Labels)) {
				continue
			}
			matched = true
			c := w.template.Spec.Containers[0]
			cmd, err := parseCommand(t, c.Command[0], r.expandArgs(t, c, w.podNames[0]))
			if err != nil {
				continue // reported by checkWorkload
			}
			for _, p := range s.Spec.Ports {
				n, ok := containerPort(c, p.TargetPort.String())
				if _, listens := cmd.ports[n]; !ok || !listens {
					t.Errorf("Service %s: port %s targets %s, not a port %s listens on (%v)", s.Name, p.Name, p.TargetPort.String(), cmd.name, cmd.ports)
				}
			}
		}
		if !matched {
			t.Errorf("Service %s selects no pods", s.Name)
		}
	}
}

// checkPartitions: the consumer pods read partitions 0..N-1, each once,
// and every consumer StatefulSet starts its pods in parallel.
func checkPartitions(t *testing.T, r rendered, parsed map[string]map[string]parsedCommand) {
	t.Helper()
	var parts []int
	for _, s := range r.statefulSets {
		pods := parsed[s.Name]
		for _, cmd := range pods {
			if cmd.name != "ferry-consumer" {
				break
			}
			if s.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
				t.Errorf("StatefulSet %s: consumers must start in parallel", s.Name)
			}
			break
		}
		for _, cmd := range pods {
			if cmd.name != "ferry-consumer" {
				continue
			}
			if cmd.flags.Lookup("kafka.partitions").Value.String() != "" {
				t.Errorf("StatefulSet %s: set the partition by pod name, not -kafka.partitions", s.Name)
			}
			p, err := consumer.PartitionFromInstanceID(cmd.flags.Lookup("instance-id").Value.String())
			if err != nil {
				t.Errorf("StatefulSet %s: %v", s.Name, err)
				continue
			}
			parts = append(parts, int(p))
		}
	}
	sort.Ints(parts)
	for i, p := range parts {
		if p != i {
			t.Fatalf("consumer pods read partitions %v; want each of 0..%d once", parts, len(parts)-1)
		}
	}
	if len(parts) == 0 {
		t.Fatal("no consumer pods")
	}
	for _, k := range r.kafkaTopics {
		if k.Spec.Partitions != len(parts) {
			t.Errorf("KafkaTopic %s has %d partitions, but %d consumer pods read them", k.Metadata.Name, k.Spec.Partitions, len(parts))
		}
	}
}

// checkPusherAddresses: every consumer's -pusher.address names a Service (or
// a StatefulSet pod behind its headless Service) whose port reaches a
// pusher's gRPC listener.
func checkPusherAddresses(t *testing.T, r rendered, parsed map[string]map[string]parsedCommand) {
	t.Helper()
	pushers := map[string]bool{} // resolvable host names of pusher pods or Services
	for _, s := range r.statefulSets {
		for pod, cmd := range parsed[s.Name] {
			if cmd.name == "ferry-pusher" {
				pushers[pod+"."+s.Spec.ServiceName] = true
			}
		}
	}
	for _, s := range r.services {
		for _, d := range r.deployments {
			if cmd, ok := parsed[d.Name][d.Name+"-7d4b9c8f6-x2x7q"]; ok && cmd.name == "ferry-pusher" &&
				labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
				pushers[s.Name] = true
			}
		}
	}
	for _, pods := range parsed {
		for pod, cmd := range pods {
			if cmd.name != "ferry-consumer" {
				continue
			}
			addr := cmd.flags.Lookup("pusher.address").Value.String()
			host, port, err := net.SplitHostPort(addr)
			if err != nil || !pushers[host] || port != "9095" {
				t.Errorf("consumer %s: -pusher.address=%s reaches no pusher's gRPC port (pushers: %v)", pod, addr, pushers)
			}
		}
	}
}

// checkGoverningServices: every StatefulSet names a headless Service that
// selects its pods, which gives them their DNS names.
func checkGoverningServices(t *testing.T, r rendered) {
	t.Helper()
	for _, s := range r.statefulSets {
		var ok bool
		for _, svc := range r.services {
			ok = ok || svc.Name == s.Spec.ServiceName && svc.Spec.ClusterIP == corev1.ClusterIPNone &&
				labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(s.Spec.Template.Labels))
		}
		if !ok {
			t.Errorf("StatefulSet %s: serviceName %q is not a headless Service selecting its pods", s.Name, s.Spec.ServiceName)
		}
	}
}
