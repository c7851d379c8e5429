# gptx-train: the project's trainer, all its sources in examples/train/ (main
# is the list of stages in train_main.c). Defined here, next to the other
# programs, so it is built into the same folder: the programs find the data
# from their own place, and the tests find gptx-train's siblings beside it.
set(_gptx_train ${CMAKE_CURRENT_LIST_DIR}/train)
add_executable(gptx-train
  ${_gptx_train}/train_main.c    # the stages, in order
  ${_gptx_train}/train_run.c     # the run state's error rules and end
  ${_gptx_train}/train_config.c  # flags, the checkpoint's record, --resume's checks
  ${_gptx_train}/train_setup.c   # machine, tokenizer, model, output
  ${_gptx_train}/train_data.c    # --text or shards, loaders, data hash
  ${_gptx_train}/train_loop.c    # evaluate, sample, checkpoint, optimizer step
  ${_gptx_train}/train_finish.c  # final sample, model, plot, summary
  ${_gptx_train}/train_options.c # the flag table
  ${_gptx_train}/train_report.c  # progress lines, metrics.jsonl, loss.svg
  ${_gptx_train}/train_outdir.c  # --out-dir: its lock, whose files it holds
  ${_gptx_train}/train_ckpts.c   # numbered checkpoints, latest, retention, --resume DIR
  ${_gptx_train}/train_dp.c)     # data parallel: validation over ranks, agreement
target_link_libraries(gptx-train PRIVATE gptx gptx_prog_common m)
target_compile_definitions(gptx-train PRIVATE _POSIX_C_SOURCE=200809L _DEFAULT_SOURCE)
gptx_target_warnings(gptx-train)
gptx_program(gptx-train INSTALL)
unset(_gptx_train)
