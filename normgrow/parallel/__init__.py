"""Several ranks: the process group and device choice (dist), DDP and FSDP2 sharding (sharding). Imports nn/ and
below."""
