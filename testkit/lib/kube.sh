# Pieces shared by testkit/kube-up (an API server) and testkit/node-up (a
# one-node cluster): sourced, not run. The caller sets `dir` (its state
# directory, the current directory too) and defines `die`; fd 3 is its
# terminal.

# A CA, the API server's serving certificate for the SANs in $1 (openssl's
# subjectAltName syntax), and the service-account key pair.
kube_certs() {
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=plexus-test-ca
  openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=kube-apiserver
  printf 'subjectAltName=%s\n' "$1" >san.ext
  openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 2 -extfile san.ext
  openssl genrsa -out sa.key 2048
  openssl rsa -in sa.key -pubout -out sa.pub
}

kube_token() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }

# etcd on 127.0.0.1:$1 (clients) and :$2 (peers), data in $dir/etcd.
kube_start_etcd() {
  etcd --data-dir "$dir/etcd" --listen-client-urls "http://127.0.0.1:$1" \
    --advertise-client-urls "http://127.0.0.1:$1" \
    --listen-peer-urls "http://127.0.0.1:$2" \
    --initial-advertise-peer-urls "http://127.0.0.1:$2" \
    --initial-cluster "default=http://127.0.0.1:$2" \
    --unsafe-no-fsync >etcd.log 2>&1 3>&- &
  echo $! >etcd.pid
}

# kube-apiserver ($1, the binary) against etcd on 127.0.0.1:$2, serving
# port $3; the rest of the arguments are the caller's own flags (bind
# address, authorization, admission).
kube_start_apiserver() {
  local bin=$1 etcd_port=$2 port=$3
  shift 3
  "$bin" --etcd-servers "http://127.0.0.1:$etcd_port" --secure-port "$port" \
    --tls-cert-file server.crt --tls-private-key-file server.key --client-ca-file ca.crt \
    --token-auth-file tokens.csv \
    --service-account-issuer https://kubernetes.default.svc --service-account-key-file sa.pub \
    --service-account-signing-key-file sa.key --service-cluster-ip-range 10.96.0.0/24 \
    --endpoint-reconciler-type none --allow-privileged=true --cert-dir "$dir/certs" \
    "$@" >apiserver.log 2>&1 3>&- &
  echo $! >apiserver.pid
}

# A kubeconfig for server $1, user $2 with credentials $3 (a YAML flow map).
kube_kubeconfig() {
  cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: "$1", certificate-authority: "$dir/ca.crt"}
users:
- name: $2
  user: $3
contexts:
- name: test
  context: {cluster: test, user: $2}
current-context: test
EOF
}

# Waits (60 s at most) for the API server at $1 to answer ok on /readyz.
kube_wait_ready() {
  local _
  for _ in $(seq 1 120); do
    if kill -0 "$(cat apiserver.pid)" 2>/dev/null &&
      [ "$(curl -s --max-time 2 --cacert ca.crt "$1/readyz" 2>/dev/null)" = ok ]; then
      return 0
    fi
    sleep 0.5
  done
  tail -n 20 apiserver.log >&3
  die "kube-apiserver not ready within 60 s"
}
