#!/usr/bin/env bash
# Install or upgrade prefetchd (node agent + steering webhook) with one command.
#
#   scripts/install-prefetchd.sh                    # with cert-manager: kubectl apply -k manifests/prefetchd/
#   scripts/install-prefetchd.sh --no-cert-manager  # without: a CA and serving certificate made here
#   ... --dry-run                                   # print the objects instead of applying them
#
# Without cert-manager this makes, with openssl, a private CA and a serving certificate for
# prefetchd-webhook.fusecache-system.svc (valid --days, default 365), and applies an overlay of
# manifests/prefetchd/no-cert-manager/ that adds them: the Secret
# fusecache-system/prefetchd-webhook-tls and the CA as the webhook's caBundle. The CA's key is
# thrown away (nothing can be signed with it later); run the script again to rotate, before
# the certificate expires. The keys live only in a temporary folder, removed on exit.
# The CSI driver (kubectl apply -k manifests/) must be installed first. docs/install.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage() { echo "usage: $0 [--no-cert-manager] [--days N] [--dry-run]" >&2; exit 2; }
cert_manager=1 dry_run=0 days=365
while [ $# -gt 0 ]; do
    case "$1" in
        --no-cert-manager) cert_manager=0 ;;
        --dry-run) dry_run=1 ;;
        --days) [ $# -ge 2 ] || usage; days="$2"; shift ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) echo "$0: unknown argument $1" >&2; usage ;;
    esac
    shift
done
case "$days" in ''|*[!0-9]*) echo "$0: --days $days: not a number of days" >&2; exit 2 ;; esac
command -v kubectl >/dev/null || { echo "$0: kubectl not found" >&2; exit 1; }

if [ "$cert_manager" = 1 ]; then
    dir="$ROOT/manifests/prefetchd"
else
    command -v openssl >/dev/null || { echo "$0: openssl not found" >&2; exit 1; }
    dir="$(mktemp -d)"
    trap 'rm -rf "$dir"' EXIT
    svc=prefetchd-webhook.fusecache-system.svc
    # kustomize takes no absolute paths: the overlay names the base relative to itself
    base="$(realpath --relative-to="$dir" "$ROOT/manifests/prefetchd/no-cert-manager")"
    (
        cd "$dir"
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
            -days "$days" -subj "/CN=prefetchd-webhook-ca" -keyout ca.key -out ca.crt \
            -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign 2>/dev/null
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
            -subj "/CN=$svc" -keyout tls.key -out tls.csr 2>/dev/null
        printf 'subjectAltName=DNS:%s,DNS:%s.cluster.local\nextendedKeyUsage=serverAuth\n' \
            "$svc" "$svc" > ext.cnf
        openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days "$days" \
            -extfile ext.cnf -out tls.crt 2>/dev/null
        rm -f ca.key ca.srl tls.csr ext.cnf
        cat > kustomization.yaml <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $base
secretGenerator:
  - name: prefetchd-webhook-tls
    namespace: fusecache-system
    type: kubernetes.io/tls
    files: [tls.crt, tls.key]
generatorOptions:
  disableNameSuffixHash: true
patches:
  - target: {kind: MutatingWebhookConfiguration, name: prefetchd-steering}
    patch: |-
      - op: add
        path: /webhooks/0/clientConfig/caBundle
        value: $(base64 -w0 ca.crt)
YAML
    )
fi
if [ "$dry_run" = 1 ]; then
    kubectl kustomize "$dir"
else
    kubectl apply -k "$dir"
fi
