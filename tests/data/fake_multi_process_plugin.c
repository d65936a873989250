/* A fake PJRT plugin standing in for a multi-process one (the CUDA
 * plugin) up to PJRT_Client_Create, built against the pinned plugin's own
 * pjrt_c_api.h by tests/distributed.rs.
 *
 * Its PJRT_Client_Create does what a real multi-process plugin does with
 * its create args: it reads node_id and num_nodes, puts a value through
 * the key-value callbacks, gets it back (deleting the value with the
 * caller's deleter), asks for a missing key with try-get and with a short
 * blocking get, and makes every error with its own callback_error. It then
 * fails with UNIMPLEMENTED and a report of what it saw, which the test
 * reads from the error message. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pjrt_c_api.h"

struct PJRT_Error {
  PJRT_Error_Code code;
  size_t size;
  char message[2048];
};

static PJRT_Error* make_error(PJRT_Error_Code code, const char* message,
                              size_t size) {
  PJRT_Error* e = calloc(1, sizeof *e);
  if (e == NULL) abort();
  e->code = code;
  e->size = size < sizeof e->message ? size : sizeof e->message - 1;
  memcpy(e->message, message, e->size);
  return e;
}

static PJRT_CallbackError callback_error = make_error;

static void error_destroy(PJRT_Error_Destroy_Args* args) { free(args->error); }

static void error_message(PJRT_Error_Message_Args* args) {
  args->message = args->error->message;
  args->message_size = args->error->size;
}

static PJRT_Error* error_get_code(PJRT_Error_GetCode_Args* args) {
  args->code = args->error->code;
  return NULL;
}

static PJRT_Error* plugin_initialize(PJRT_Plugin_Initialize_Args* args) {
  (void)args;
  return NULL;
}

static long long int_option(const PJRT_Client_Create_Args* args,
                            const char* name) {
  for (size_t i = 0; i < args->num_options; i++) {
    const PJRT_NamedValue* o = &args->create_options[i];
    if (o->type == PJRT_NamedValue_kInt64 && o->name_size == strlen(name) &&
        memcmp(o->name, name, o->name_size) == 0) {
      return (long long)o->int64_value;
    }
  }
  return -1;
}

/* Appends "<label>=<code>:<message>" for an error and frees it. */
static void report_error(char* out, size_t cap, const char* label,
                         PJRT_Error* e) {
  size_t n = strlen(out);
  snprintf(out + n, cap - n, " %s=error%d:%.*s|", label, (int)e->code,
           (int)(e->size > 200 ? 200 : e->size), e->message);
  free(e);
}

static void probe_store(const PJRT_Client_Create_Args* args, char* out,
                        size_t cap) {
  static const char value[] = "from the plugin";
  PJRT_KeyValuePutCallback_Args put = {0};
  put.struct_size = PJRT_KeyValuePutCallback_Args_STRUCT_SIZE;
  put.key = "probe";
  put.key_size = 5;
  put.value = value;
  put.value_size = sizeof value - 1;
  put.callback_error = &callback_error;
  put.user_arg = args->kv_put_user_arg;
  PJRT_Error* e = args->kv_put_callback(&put);
  if (e != NULL) {
    report_error(out, cap, "put", e);
    return;
  }
  strncat(out, " put=ok", cap - strlen(out) - 1);

  PJRT_KeyValueGetCallback_Args get = {0};
  get.struct_size = PJRT_KeyValueGetCallback_Args_STRUCT_SIZE;
  get.key = "probe";
  get.key_size = 5;
  get.timeout_in_ms = 5000;
  get.callback_error = &callback_error;
  get.user_arg = args->kv_get_user_arg;
  e = args->kv_get_callback(&get);
  if (e != NULL) {
    report_error(out, cap, "get", e);
    return;
  }
  size_t n = strlen(out);
  snprintf(out + n, cap - n, " get=%.*s", (int)get.value_size, get.value);
  get.value_deleter_callback(get.value);

  PJRT_KeyValueTryGetCallback_Args try_get = {0};
  try_get.struct_size = PJRT_KeyValueTryGetCallback_Args_STRUCT_SIZE;
  try_get.key = "absent";
  try_get.key_size = 6;
  try_get.callback_error = &callback_error;
  try_get.user_arg = args->kv_try_get_user_arg;
  e = args->kv_try_get_callback(&try_get);
  if (e == NULL) {
    strncat(out, " try_get_absent=found", cap - strlen(out) - 1);
    try_get.value_deleter_callback(try_get.value);
  } else {
    report_error(out, cap, "try_get_absent", e);
  }

  get.key = "absent";
  get.key_size = 6;
  get.timeout_in_ms = 100;
  get.value = NULL;
  e = args->kv_get_callback(&get);
  if (e == NULL) {
    strncat(out, " get_absent=found", cap - strlen(out) - 1);
    get.value_deleter_callback(get.value);
  } else {
    report_error(out, cap, "get_absent", e);
  }
}

static PJRT_Error* client_create(PJRT_Client_Create_Args* args) {
  char report[1536];
  snprintf(report, sizeof report, "fake plugin saw node_id=%lld num_nodes=%lld",
           int_option(args, "node_id"), int_option(args, "num_nodes"));
  if (args->kv_get_callback == NULL || args->kv_try_get_callback == NULL ||
      args->kv_put_callback == NULL) {
    strncat(report, " and no key-value callbacks",
            sizeof report - strlen(report) - 1);
  } else {
    probe_store(args, report, sizeof report);
  }
  return make_error(PJRT_Error_Code_UNIMPLEMENTED, report, strlen(report));
}

const PJRT_Api* GetPjrtApi(void) {
  static PJRT_Api api;
  api.struct_size = PJRT_Api_STRUCT_SIZE;
  api.pjrt_api_version.struct_size = PJRT_Api_Version_STRUCT_SIZE;
  api.pjrt_api_version.major_version = PJRT_API_MAJOR;
  api.pjrt_api_version.minor_version = PJRT_API_MINOR;
  api.PJRT_Error_Destroy = error_destroy;
  api.PJRT_Error_Message = error_message;
  api.PJRT_Error_GetCode = error_get_code;
  api.PJRT_Plugin_Initialize = plugin_initialize;
  api.PJRT_Client_Create = client_create;
  return &api;
}
