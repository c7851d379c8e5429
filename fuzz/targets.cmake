# The fuzz targets, one table for the libFuzzer binaries (fuzz/CMakeLists.txt,
# clang only) and the corpus replay tests of every build (tests/, through
# gptx_fuzz_replay_test). Per target <t>:
#   GPTX_FUZZ_<t>_SOURCES  files beyond fuzz/fuzz_util.c (relative to the root)
#   GPTX_FUZZ_<t>_CORPUS   its corpus folder (seeds and findings), also known
#                          to fuzz/run_fuzz.sh
#   GPTX_FUZZ_<t>_DEFS     compile definitions; _INCLUDES include folders
#   GPTX_FUZZ_<t>_SEED_MIN what each seed must return (default 1)
# The entry is gptx_fuzz_<t>, the seed writer gptx_fuzz_<t>_seeds (fuzz_util.h).
# The checkpoint target (fuzz_entry.c) has its own replay test, test_fuzz_corpus.
set(GPTX_FUZZ_TARGETS tok_files tok_roundtrip shard hf_config train_options)

set(GPTX_FUZZ_tok_files_SOURCES fuzz/fuzz_tokenizer.c)
set(GPTX_FUZZ_tok_files_CORPUS tests/text/corpus_files)
set(GPTX_FUZZ_tok_files_DEFS GPTX_FUZZ_GPT2_DIR="${PROJECT_SOURCE_DIR}/data/gpt2")

set(GPTX_FUZZ_tok_roundtrip_SOURCES fuzz/fuzz_tokenizer.c)
set(GPTX_FUZZ_tok_roundtrip_CORPUS tests/text/corpus_roundtrip)
set(GPTX_FUZZ_tok_roundtrip_DEFS ${GPTX_FUZZ_tok_files_DEFS})

set(GPTX_FUZZ_shard_SOURCES fuzz/fuzz_shard.c)
set(GPTX_FUZZ_shard_CORPUS tests/data/corpus)

set(GPTX_FUZZ_hf_config_SOURCES fuzz/fuzz_hf_config.c)
set(GPTX_FUZZ_hf_config_CORPUS tests/io/corpus_hf_config)
set(GPTX_FUZZ_hf_config_DEFS
    GPTX_FUZZ_HF_WEIGHTS="${PROJECT_SOURCE_DIR}/tests/io/corpus/seed_hf_f16.safetensors")
set(GPTX_FUZZ_hf_config_SEED_MIN 2) # parsed and imported

set(GPTX_FUZZ_train_options_SOURCES fuzz/fuzz_train_options.c examples/train/train_options.c
                                    examples/common/prog_data.c examples/common/prog_presets.c
                                    examples/common/prog_flags.c)
set(GPTX_FUZZ_train_options_CORPUS tests/examples/corpus_train_options)
set(GPTX_FUZZ_train_options_DEFS _POSIX_C_SOURCE=200809L)
set(GPTX_FUZZ_train_options_INCLUDES examples examples/common)

# Adds target <t>'s sources, definitions and include folders to an executable.
function(gptx_fuzz_add_sources exe t)
  list(TRANSFORM GPTX_FUZZ_${t}_SOURCES PREPEND ${PROJECT_SOURCE_DIR}/ OUTPUT_VARIABLE src)
  list(TRANSFORM GPTX_FUZZ_${t}_INCLUDES PREPEND ${PROJECT_SOURCE_DIR}/ OUTPUT_VARIABLE inc)
  target_sources(${exe} PRIVATE ${src} ${PROJECT_SOURCE_DIR}/fuzz/fuzz_util.c)
  target_include_directories(${exe} PRIVATE ${PROJECT_SOURCE_DIR}/fuzz ${inc})
  target_compile_definitions(${exe} PRIVATE ${GPTX_FUZZ_${t}_DEFS} GPTX_FUZZ_ONE=gptx_fuzz_${t}
                                            GPTX_FUZZ_SEEDS=gptx_fuzz_${t}_seeds)
endfunction()
