# Sourced by the docker/ scripts: the engine and its flags.
#   ENGINE=podman|docker   (default: podman if installed, else docker)
# With podman, CONTAINERS_CONF defaults to docker/containers.conf (runc,
# no default ulimits, cgroupfs; see docker/README.md).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -z "${ENGINE:-}" ]]; then
  if command -v podman >/dev/null; then ENGINE=podman
  elif command -v docker >/dev/null; then ENGINE=docker
  else
    echo "docker/: neither podman nor docker is installed" \
         "(Debian: apt-get install podman buildah runc debootstrap)" >&2
    exit 1
  fi
fi
build_flags=()
if [[ "$ENGINE" == podman ]]; then
  export CONTAINERS_CONF="${CONTAINERS_CONF:-$repo/docker/containers.conf}"
  # chroot isolation: no nested namespaces needed for RUN steps; the docker
  # format keeps HEALTHCHECK (the OCI format has no such field).
  build_flags=(--isolation=chroot --network=host --format=docker)
fi
container_dir="$repo/build/container"
