"""A real engine end to end (issue 25): a tiny MoE model made here (gguf_model), decoded and
traced through llama.cpp (llama_run, trace_out). Everything here needs the `engine` extra
(llama-cpp-python, gguf), imported through bench.engine.extra so that a missing extra is one
line naming the install command."""
