"""What is done with a counterexample once an engine has found it:

- replay.py: re-apply its actions to the model and confirm the recorded
  violation at the recorded step (or say where the trace no longer applies)
- pool.py: replay it on a real KV pool (numpy, or CuPy on a GPU), running
  every copy and kernel, and compare each kernel's output with the reference
- output.py: where a check's evidence goes: the counterexample files of an
  output folder, written and removed under safe rules
- comparison.py: two runs' verdicts, shortest lengths and peaks side by
  side, read from their --json files or counterexample folders (`cowcheck diff`)"""
