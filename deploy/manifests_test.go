package deploy_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// obj is a decoded YAML mapping; get walks it by keys.
type obj = map[string]any

func get(v any, path ...string) any {
	for _, k := range path {
		m, ok := v.(obj)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func getObj(v any, path ...string) obj {
	m, _ := get(v, path...).(obj)
	return m
}

func getList(v any, path ...string) []any {
	l, _ := get(v, path...).([]any)
	return l
}

// getString is the value at path formatted as a string, "" when absent.
func getString(v any, path ...string) string {
	if x := get(v, path...); x != nil {
		return fmt.Sprint(x)
	}
	return ""
}

func stringList(l []any) []string {
	out := make([]string, len(l))
	for i, v := range l {
		out[i] = fmt.Sprint(v)
	}
	return out
}

// flagValues returns the value of every --name=value / --name value in a
// floe command line (booleans given without a value are "true").
func flagValues(t *testing.T, args []string) map[string]string {
	t.Helper()
	f := flags(t)
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !hasValue {
			if f.types[name] == "bool" {
				value = "true"
			} else if i+1 < len(args) {
				i++
				value = args[i]
			}
		}
		out[name] = value
	}
	return out
}

// setting returns a flag's effective value given a command line and an
// environment: the command line wins, as in floe.
func setting(args, env map[string]string, flag string) (string, bool) {
	if v, ok := args[flag]; ok {
		return v, true
	}
	v, ok := env["FLOE_"+strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))]
	return v, ok
}

func port(t *testing.T, hostport string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(hostport)
	require.NoError(t, err, hostport)
	return p
}

// TestKubernetes checks deploy/kubernetes/floe.yaml: the floe flags and
// FLOE_* variables exist and parse; the StatefulSet's replica count equals
// --bootstrap-expect and --join names exactly its pods through the headless
// Service; probes hit /readyz and /healthz on the HTTP port; the data volume
// is mounted at --data-dir; and the PodDisruptionBudget keeps a quorum.
func TestKubernetes(t *testing.T) {
	const path = "kubernetes/floe.yaml"
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	checkEnvMentions(t, path)

	byKind := map[string][]obj{}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		var doc obj
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if doc == nil {
			continue
		}
		kind := getString(doc, "kind")
		byKind[kind] = append(byKind[kind], doc)
	}
	require.Len(t, byKind["StatefulSet"], 1)
	require.Len(t, byKind["PodDisruptionBudget"], 1)
	sts := byKind["StatefulSet"][0]
	stsName := getString(sts, "metadata", "name")
	replicas, ok := get(sts, "spec", "replicas").(int)
	require.True(t, ok, "spec.replicas")
	require.GreaterOrEqual(t, replicas, 1)
	assert.Equal(t, "Parallel", getString(sts, "spec", "podManagementPolicy"),
		"no pod is ready before a leader exists, so OrderedReady would never start the second pod")
	podLabels := getObj(sts, "spec", "template", "metadata", "labels")
	require.NotEmpty(t, podLabels)
	assert.Equal(t, getObj(sts, "spec", "selector", "matchLabels"), podLabels)

	// The headless Service the StatefulSet names.
	svcName := getString(sts, "spec", "serviceName")
	var headless obj
	for _, s := range byKind["Service"] {
		if getString(s, "metadata", "name") == svcName {
			headless = s
		}
		assert.Equal(t, podLabels, getObj(s, "spec", "selector"), "Service %s selects the pods", getString(s, "metadata", "name"))
	}
	require.NotNil(t, headless, "Service %s (spec.serviceName)", svcName)
	assert.Equal(t, "None", getString(headless, "spec", "clusterIP"), "the peer Service is headless")
	assert.Equal(t, true, get(headless, "spec", "publishNotReadyAddresses"),
		"peers must resolve each other before any is ready")

	containers := getList(sts, "spec", "template", "spec", "containers")
	require.Len(t, containers, 1)
	ctr := containers[0]
	args := stringList(getList(ctr, "args"))
	checkArgs(t, path+": args", args)
	env := map[string]string{}
	for _, e := range getList(ctr, "env") {
		name := getString(e, "name")
		if v := get(e, "value"); v != nil {
			env[name] = fmt.Sprint(v)
		} else {
			env[name] = "${from " + name + "}" // valueFrom: not checked
		}
	}
	checkEnv(t, path+": env", env)
	fv := flagValues(t, args)

	// --bootstrap-expect and --join follow the replica count.
	be, ok := setting(fv, env, "bootstrap-expect")
	require.True(t, ok, "--bootstrap-expect is set")
	assert.Equal(t, strconv.Itoa(replicas), be, "--bootstrap-expect equals spec.replicas")
	clusterAddr, ok := setting(fv, env, "cluster-addr")
	require.True(t, ok, "--cluster-addr is set")
	clusterPort := port(t, clusterAddr)
	join, _ := setting(fv, env, "join")
	var want []string
	for i := range replicas {
		want = append(want, fmt.Sprintf("%s-%d.%s.$(POD_NAMESPACE).svc.cluster.local:%s", stsName, i, svcName, clusterPort))
	}
	assert.Equal(t, want, strings.Split(join, ","), "--join names every pod of the StatefulSet")
	advertise, _ := setting(fv, env, "cluster-advertise")
	assert.Equal(t, fmt.Sprintf("$(POD_NAME).%s.$(POD_NAMESPACE).svc.cluster.local:%s", svcName, clusterPort), advertise,
		"each pod advertises its stable DNS name")
	nodeID, _ := setting(fv, env, "node-id")
	assert.Equal(t, "$(POD_NAME)", nodeID, "the node ID is the pod name, stable across restarts")
	for _, v := range []string{"POD_NAME", "POD_NAMESPACE"} {
		assert.Contains(t, env, v, "$(%s) is defined before use", v)
	}

	// Ports: the named ports are floe's, and every Service port targets one.
	httpAddr, ok := setting(fv, env, "http-addr")
	require.True(t, ok, "--http-addr is set")
	ports := map[string]string{}
	for _, p := range getList(ctr, "ports") {
		ports[getString(p, "name")] = getString(p, "containerPort")
	}
	assert.Equal(t, map[string]string{"http": port(t, httpAddr), "cluster": clusterPort}, ports)
	for _, s := range byKind["Service"] {
		for _, p := range getList(s, "spec", "ports") {
			assert.Contains(t, ports, getString(p, "targetPort"), "Service %s port %s", getString(s, "metadata", "name"), getString(p, "name"))
		}
	}
	assert.Equal(t, ports["http"], getString(sts, "spec", "template", "metadata", "annotations", "prometheus.io/port"))

	// Probes.
	assert.Equal(t, "/readyz", getString(ctr, "readinessProbe", "httpGet", "path"))
	assert.Equal(t, "http", getString(ctr, "readinessProbe", "httpGet", "port"))
	assert.Equal(t, "/healthz", getString(ctr, "livenessProbe", "httpGet", "path"))
	assert.Equal(t, "http", getString(ctr, "livenessProbe", "httpGet", "port"))

	// The data volume: a claim template mounted at --data-dir.
	dataDir, ok := setting(fv, env, "data-dir")
	require.True(t, ok, "--data-dir is set")
	mounts := map[string]string{}
	for _, m := range getList(ctr, "volumeMounts") {
		mounts[getString(m, "mountPath")] = getString(m, "name")
	}
	claim := mounts[dataDir]
	require.NotEmpty(t, claim, "a volume is mounted at --data-dir %s", dataDir)
	found := false
	for _, vct := range getList(sts, "spec", "volumeClaimTemplates") {
		if getString(vct, "metadata", "name") == claim {
			found = true
			assert.Equal(t, []any{"ReadWriteOnce"}, getList(vct, "spec", "accessModes"))
		}
	}
	assert.True(t, found, "volume %s at %s is a volumeClaimTemplate", claim, dataDir)

	// The PodDisruptionBudget leaves a majority up.
	pdb := byKind["PodDisruptionBudget"][0]
	assert.Equal(t, podLabels, getObj(pdb, "spec", "selector", "matchLabels"))
	quorum := replicas/2 + 1
	switch {
	case get(pdb, "spec", "maxUnavailable") != nil:
		mu, ok := get(pdb, "spec", "maxUnavailable").(int)
		require.True(t, ok, "maxUnavailable is a number")
		assert.LessOrEqual(t, mu, replicas-quorum, "maxUnavailable keeps a quorum of %d of %d", quorum, replicas)
		assert.GreaterOrEqual(t, mu, 1, "maxUnavailable 0 blocks every drain")
	case get(pdb, "spec", "minAvailable") != nil:
		ma, ok := get(pdb, "spec", "minAvailable").(int)
		require.True(t, ok, "minAvailable is a number")
		assert.GreaterOrEqual(t, ma, quorum)
	default:
		t.Error("the PodDisruptionBudget sets neither maxUnavailable nor minAvailable")
	}
}

// TestDockerCompose checks deploy/docker-compose.yml: the floe services'
// flags and FLOE_* variables exist and parse; --bootstrap-expect is the
// number of floe services and --join names each one's advertised address;
// the warehouse bucket is the one the s3-bucket service creates on the
// volume versitygw serves, and the S3 endpoint is the versitygw service.
func TestDockerCompose(t *testing.T) {
	const path = "docker-compose.yml"
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	checkEnvMentions(t, path)
	var doc obj
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	services := getObj(doc, "services")
	require.NotEmpty(t, services)

	type node struct {
		name      string
		args, env map[string]string
	}
	var nodes []node
	for name, svc := range services {
		if !strings.HasPrefix(getString(svc, "image"), "floe:") {
			continue
		}
		where := path + ": service " + name
		args := stringList(getList(svc, "command"))
		checkArgs(t, where+": command", args)
		env := map[string]string{}
		for k, v := range getObj(svc, "environment") {
			env[k] = fmt.Sprint(v)
		}
		checkEnv(t, where+": environment", env)
		nodes = append(nodes, node{name, flagValues(t, args), env})
	}
	require.Len(t, nodes, 3, "floe services (image floe:...)")

	var advertised []string
	ids := map[string]bool{}
	for _, n := range nodes {
		id, _ := setting(n.args, n.env, "node-id")
		assert.NotEmpty(t, id, "%s: --node-id", n.name)
		assert.False(t, ids[id], "%s: --node-id %s is taken", n.name, id)
		ids[id] = true
		adv, ok := setting(n.args, n.env, "cluster-advertise")
		if !ok {
			adv, _ = setting(n.args, n.env, "cluster-addr")
		}
		assert.Equal(t, n.name, strings.Split(adv, ":")[0], "%s advertises its service name", n.name)
		advertised = append(advertised, adv)
		be, _ := setting(n.args, n.env, "bootstrap-expect")
		assert.Equal(t, strconv.Itoa(len(nodes)), be, "%s: --bootstrap-expect is the number of nodes", n.name)
	}
	for _, n := range nodes {
		join, _ := setting(n.args, n.env, "join")
		assert.ElementsMatch(t, advertised, strings.Split(join, ","), "%s: --join names every node", n.name)
	}

	// S3: the endpoint is the versitygw service, the bucket exists there.
	n := nodes[0]
	warehouse, _ := setting(n.args, n.env, "warehouse")
	bucket, ok := strings.CutPrefix(warehouse, "s3://")
	require.True(t, ok, "the warehouse is on S3: %s", warehouse)
	bucket, _, _ = strings.Cut(bucket, "/")
	endpoint, _ := setting(n.args, n.env, "s3-endpoint")
	m := regexp.MustCompile(`^http://([a-z0-9-]+):(\d+)$`).FindStringSubmatch(endpoint)
	require.NotNil(t, m, "--s3-endpoint %q names a service", endpoint)
	s3 := getObj(services, m[1])
	require.NotNil(t, s3, "service %s (--s3-endpoint)", m[1])
	require.Contains(t, getString(s3, "image"), "versitygw")
	assert.Equal(t, ":"+m[2], getString(s3, "environment", "VGW_PORT"))
	pathStyle, _ := setting(n.args, n.env, "s3-path-style")
	assert.Equal(t, "true", pathStyle, "versitygw needs path-style addressing")
	cmd := stringList(getList(s3, "command"))
	require.Len(t, cmd, 2, "versitygw command: posix <root>")
	assert.Equal(t, "posix", cmd[0])
	root := cmd[1]
	bucketSvc := getObj(services, "s3-bucket")
	require.NotNil(t, bucketSvc)
	assert.Equal(t, []string{"mkdir", "-p", root + "/" + bucket}, stringList(getList(bucketSvc, "entrypoint")),
		"the s3-bucket service creates bucket %s under versitygw's root %s", bucket, root)
	volumeAt := func(svc obj, dir string) string {
		for _, v := range stringList(getList(svc, "volumes")) {
			if name, mnt, _ := strings.Cut(v, ":"); strings.TrimSuffix(mnt, ":ro") == dir {
				return name
			}
		}
		return ""
	}
	assert.NotEmpty(t, volumeAt(s3, root))
	assert.Equal(t, volumeAt(s3, root), volumeAt(bucketSvc, root), "s3 and s3-bucket share the bucket volume")
	for _, k := range []string{"access-key-id", "secret-access-key"} {
		v, _ := setting(n.args, n.env, "s3-"+k)
		assert.NotEmpty(t, v, "--s3-%s", k)
	}
	assert.Equal(t, getString(s3, "environment", "ROOT_ACCESS_KEY_ID"), n.env["FLOE_S3_ACCESS_KEY_ID"])
	assert.Equal(t, getString(s3, "environment", "ROOT_SECRET_ACCESS_KEY"), n.env["FLOE_S3_SECRET_ACCESS_KEY"])
}

// systemdUnit parses a unit file into section → key → values (a key may
// repeat); continuation lines (a trailing backslash) are joined.
func systemdUnit(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[string]map[string][]string{}
	section := ""
	var pending string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if pending != "" {
			line = pending + " " + line
			pending = ""
		}
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			pending = strings.TrimSuffix(line, `\`)
			continue
		}
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = line[1 : len(line)-1]
			out[section] = map[string][]string{}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		require.True(t, ok, "%s: %q is not key=value", path, line)
		require.NotEmpty(t, section, "%s: %q outside a section", path, line)
		out[section][strings.TrimSpace(k)] = append(out[section][strings.TrimSpace(k)], strings.TrimSpace(v))
	}
	require.NoError(t, sc.Err())
	return out
}

// envFile parses a systemd EnvironmentFile. Commented-out assignments
// ("#FLOE_X=...") are returned too, in commented: they are examples meant to
// be enabled.
func envFile(t *testing.T, path string) (set, commented map[string]string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	set, commented = map[string]string{}, map[string]string{}
	assign := regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)=(.*)$`)
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		rest, isComment := strings.CutPrefix(line, "#")
		m := assign.FindStringSubmatch(strings.TrimSpace(rest))
		switch {
		case m != nil && isComment:
			commented[m[1]] = strings.Trim(m[2], `"'`)
		case m != nil:
			set[m[1]] = strings.Trim(m[2], `"'`)
		case !isComment && line != "":
			t.Errorf("%s: %q is not KEY=VALUE", path, line)
		}
	}
	require.NoError(t, sc.Err())
	return set, commented
}

// TestSystemd checks deploy/systemd/floe.service and floe.env: the flags in
// ExecStart and every FLOE_* variable (Environment=, the environment file,
// its commented-out examples) exist and parse; --data-dir is the unit's
// StateDirectory; the example environment describes a node of a cluster.
func TestSystemd(t *testing.T) {
	const unitPath, envPath = "systemd/floe.service", "systemd/floe.env"
	checkEnvMentions(t, unitPath)
	checkEnvMentions(t, envPath)
	unit := systemdUnit(t, unitPath)
	svc := unit["Service"]
	require.NotNil(t, svc, "[Service]")
	require.NotNil(t, unit["Install"], "[Install]")

	execStart := svc["ExecStart"]
	require.Len(t, execStart, 1, "one ExecStart")
	argv := strings.Fields(execStart[0])
	require.Equal(t, "/usr/local/bin/floe", argv[0])
	// %S: the state directory root (/var/lib for system units).
	args := strings.Fields(strings.ReplaceAll(strings.Join(argv[1:], " "), "%S", "/var/lib"))
	checkArgs(t, unitPath+": ExecStart", args)
	fv := flagValues(t, args)

	env := map[string]string{}
	for _, e := range svc["Environment"] {
		for _, kv := range strings.Fields(e) {
			k, v, ok := strings.Cut(strings.Trim(kv, `"`), "=")
			require.True(t, ok, "%s: Environment=%s", unitPath, e)
			env[k] = v
		}
	}
	checkEnv(t, unitPath+": Environment", env)
	require.Equal(t, []string{"/etc/floe/floe.env"}, svc["EnvironmentFile"])
	set, commented := envFile(t, envPath)
	checkEnv(t, envPath, set)
	for k, v := range commented {
		if v != "" {
			checkEnv(t, envPath+" (commented out)", map[string]string{k: v})
		} else {
			checkEnv(t, envPath+" (commented out)", map[string]string{k: "$unset"})
		}
	}
	for k, v := range set {
		if _, ok := env[k]; !ok {
			env[k] = v
		}
	}

	require.Equal(t, []string{"floe"}, svc["StateDirectory"])
	dataDir, _ := setting(fv, env, "data-dir")
	assert.Equal(t, "/var/lib/floe", dataDir, "--data-dir is the StateDirectory")
	assert.Equal(t, []string{"2"}, svc["RestartPreventExitStatus"], "floe exits 2 on a bad flag or value: no restart loop")
	for _, flag := range []string{"node-id", "http-addr", "cluster-addr", "join", "bootstrap-expect", "warehouse"} {
		v, ok := setting(fv, env, flag)
		assert.True(t, ok && v != "", "%s sets --%s", envPath, flag)
	}
	clusterAddr, _ := setting(fv, env, "cluster-addr")
	join, _ := setting(fv, env, "join")
	be, _ := setting(fv, env, "bootstrap-expect")
	assert.Contains(t, strings.Split(join, ","), clusterAddr, "--join lists every node, this one included")
	assert.Equal(t, strconv.Itoa(len(strings.Split(join, ","))), be, "--bootstrap-expect is the number of --join nodes")
}

// TestDockerfile checks the FLOE_* variables the image sets.
func TestDockerfile(t *testing.T) {
	const path = "Dockerfile"
	checkEnvMentions(t, path)
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	// ENV KEY=VALUE [KEY=VALUE...], possibly continued with backslashes.
	text := strings.ReplaceAll(string(raw), "\\\n", " ")
	env := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "ENV ")
		if !ok {
			continue
		}
		for _, kv := range strings.Fields(rest) {
			k, v, ok := strings.Cut(kv, "=")
			require.True(t, ok, "%s: ENV %s", path, rest)
			env[k] = v
		}
	}
	require.NotEmpty(t, env)
	checkEnv(t, path, env)
	assert.Equal(t, "/data", env["FLOE_DATA_DIR"])
}
