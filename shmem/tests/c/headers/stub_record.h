/*
 * stub_record.h - interface of the generated stub library (stubs.c) used by the header tests.
 * Every stub routine stores its own name in gsas_stub_last, so a test can check which
 * routine a call (a C11 generic, or a typed name from C++) reached.
 */
#ifndef GSAS_TEST_STUB_RECORD_H
#define GSAS_TEST_STUB_RECORD_H
#ifdef __cplusplus
extern "C" {
#endif
extern const char *gsas_stub_last;
#ifdef __cplusplus
}
#endif
#endif
