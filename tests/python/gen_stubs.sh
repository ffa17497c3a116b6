#!/bin/sh
# gen_stubs.sh OUTDIR - generates Strata's Python protobuf and gRPC modules (from proto/) into
# OUTDIR, e.g. OUTDIR/parca/query/v1alpha1/query_pb2.py and query_pb2_grpc.py. Put OUTDIR on
# sys.path / PYTHONPATH to import them. Uses /usr/bin/python3 (Debian's grpc_tools), or $PYTHON.
set -eu
if [ $# -ne 1 ]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
out=$1
here=$(cd "$(dirname "$0")" && pwd)
proto_dir=$(cd "$here/../../proto" && pwd)
python=${PYTHON:-/usr/bin/python3}
wkt_dir=${STRATA_PROTO_WKT_DIR:-/usr/include}

mkdir -p "$out"
cd "$proto_dir"
# shellcheck disable=SC2046
"$python" -m grpc_tools.protoc -I"$proto_dir" -I"$wkt_dir" \
    --python_out="$out" --grpc_python_out="$out" \
    $(find . -name '*.proto' | sed 's|^\./||' | sort)
