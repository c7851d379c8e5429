/* Where the programs find the bundled data (the GPT-2 tokenizer files and
 * the default texts), wherever they are installed or built. */
#ifndef GPTX_PROG_DATA_H
#define GPTX_PROG_DATA_H

/* The first folder that holds gpt2/encoder.json of:
 *   1. $GPTX_DATA_DIR (then used even if it lacks the file: the user said so);
 *   2. <this program's folder>/GPTX_DATA_FROM_BIN: the installed layout
 *      (bin/ -> share/gptx), and the build tree, which mirrors it;
 *   3. GPTX_DATA_INSTALL_DIR, the configured install folder;
 *   4. "data", a source checkout's folder, from the current directory.
 * Never a path into the source tree the program was built from. */
const char *prog_data_dir(void);

/* prog_data_dir()/name, in one of 8 static buffers used in turn. */
const char *prog_data_path(const char *name);

#endif
