/* Test "NEFF": a valid shared object without the nkrt_neff_query entry point. */
int not_a_neff_entry(void) { return 42; }
