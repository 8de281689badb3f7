"""Generated peer protocol stubs: do not edit, run scripts/gen-proto.sh."""
