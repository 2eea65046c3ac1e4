"""The roof: tokdrift's command lines (`tokdrift.cli`: `soak`, `diag`, the fault matrix), above every
package; nothing below imports it. The ground every package stands on (the version, the one
user-facing error class, the Label base of closed sets) is the package `ground`; the plugins a
user's vLLM loads are the package `vllm_plugin`."""
