"""Generated CSI v1 stubs: do not edit, run scripts/gen-proto.sh."""
