"""Scripted stand-ins for engine behaviour a CPU cannot produce (GPU OOM, NCCL)."""
