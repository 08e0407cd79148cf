"""Traces of vLLM's metrics page made by vLLM's own scheduler and KV cache manager (vllm/v1/core,
pure Python) driven on CPU with an RL rollout workload, with and without injected failure
shapes: see bench/vllm_core/README.md. The modules that import vllm (core, faults, drive) run
only under the vLLM venv's python (tools/vllm-venv.sh); cost, workload and scenarios are standard
library only; traces runs them from the operator's venv (`python -m bench vllm-traces`)."""
